/* Buss's augmented 2nd-order update (torque-free), the C baseline of `jaxrot bench throughput`.
 *
 * For each body: w = I_w^-1 L with I_w^-1 x = R diag(1/J) R^T x, w' = -I_w^-1 (w x L),
 * w_bar = w + h/2 w' + h^2/12 w' x w, R <- exp(h w_bar) R (Rodrigues). L is constant. R is row-major
 * (9 doubles per body). Compiled at run time by the benchmark (cc -O2, and -O3 -march=native
 * -ffast-math for the vectorised variant); bodies are independent, so the outer loop is split over
 * threads with OpenMP when available. */
#include <math.h>
#include <stddef.h>

static inline void cross(const double *a, const double *b, double *c) {
    c[0] = a[1] * b[2] - a[2] * b[1];
    c[1] = a[2] * b[0] - a[0] * b[2];
    c[2] = a[0] * b[1] - a[1] * b[0];
}

static inline void inv_inertia(const double *R, const double *J, const double *x, double *y) {
    double b[3];
    for (int i = 0; i < 3; i++) b[i] = (R[i] * x[0] + R[3 + i] * x[1] + R[6 + i] * x[2]) / J[i];
    for (int i = 0; i < 3; i++) y[i] = R[3 * i] * b[0] + R[3 * i + 1] * b[1] + R[3 * i + 2] * b[2];
}

static void step(double *R, const double *L, const double *J, double h) {
    double w[3], wL[3], w1[3], c[3], v[3], E[9], out[9];
    inv_inertia(R, J, L, w);
    cross(w, L, wL);
    inv_inertia(R, J, wL, w1);
    for (int i = 0; i < 3; i++) w1[i] = -w1[i];
    cross(w1, w, c);
    for (int i = 0; i < 3; i++) v[i] = h * (w[i] + 0.5 * h * w1[i] + h * h / 12.0 * c[i]);
    double a2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2], s1, s2;
    if (a2 < 1e-8) {
        s1 = 1.0 - a2 / 6.0 + a2 * a2 / 120.0;
        s2 = 0.5 - a2 / 24.0 + a2 * a2 / 720.0;
    } else {
        double a = sqrt(a2), sh = sin(0.5 * a);
        s1 = sin(a) / a;
        s2 = 2.0 * sh * sh / a2;
    }
    /* exp(v) = I + s1 V + s2 V^2,  V^2 = v v^T - a2 I */
    E[0] = 1 + s2 * (v[0] * v[0] - a2); E[1] = -s1 * v[2] + s2 * v[0] * v[1]; E[2] = s1 * v[1] + s2 * v[0] * v[2];
    E[3] = s1 * v[2] + s2 * v[1] * v[0]; E[4] = 1 + s2 * (v[1] * v[1] - a2); E[5] = -s1 * v[0] + s2 * v[1] * v[2];
    E[6] = -s1 * v[1] + s2 * v[2] * v[0]; E[7] = s1 * v[0] + s2 * v[2] * v[1]; E[8] = 1 + s2 * (v[2] * v[2] - a2);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            out[3 * i + j] = E[3 * i] * R[j] + E[3 * i + 1] * R[3 + j] + E[3 * i + 2] * R[6 + j];
    for (int k = 0; k < 9; k++) R[k] = out[k];
}

void buss2p_run(double *R, const double *L, const double *J, double h, long n_bodies, long n_steps) {
#pragma omp parallel for schedule(static)
    for (long b = 0; b < n_bodies; b++)
        for (long s = 0; s < n_steps; s++) step(R + 9 * b, L + 3 * b, J, h);
}

/* The same update, structure of arrays: R[k * n + b] (k = 0..8, row-major entries), L[k * n + b].
 * The inner loop runs over bodies with no branch (the Taylor/closed-form switch is a select), so
 * with -O3 -march=native -ffast-math the compiler vectorises it across bodies (SIMD sin/cos from
 * libmvec); blocks of bodies stay in cache over all steps; blocks are split over threads. */
#define SOA_BLOCK 256
void buss2p_run_soa(double *R, const double *L, const double *J, double h, long n, long n_steps) {
    const double iJ0 = 1.0 / J[0], iJ1 = 1.0 / J[1], iJ2 = 1.0 / J[2];
#pragma omp parallel for schedule(static)
    for (long b0 = 0; b0 < n; b0 += SOA_BLOCK) {
        long b1 = b0 + SOA_BLOCK < n ? b0 + SOA_BLOCK : n;
        for (long s = 0; s < n_steps; s++) {
#pragma omp simd
            for (long b = b0; b < b1; b++) {
                double r[9], l[3], w[3], wl[3], w1[3], v[3], t[3];
                for (int k = 0; k < 9; k++) r[k] = R[k * n + b];
                for (int k = 0; k < 3; k++) l[k] = L[k * n + b];
                /* w = R diag(1/J) R^T l */
                t[0] = (r[0] * l[0] + r[3] * l[1] + r[6] * l[2]) * iJ0;
                t[1] = (r[1] * l[0] + r[4] * l[1] + r[7] * l[2]) * iJ1;
                t[2] = (r[2] * l[0] + r[5] * l[1] + r[8] * l[2]) * iJ2;
                for (int i = 0; i < 3; i++) w[i] = r[3 * i] * t[0] + r[3 * i + 1] * t[1] + r[3 * i + 2] * t[2];
                wl[0] = w[1] * l[2] - w[2] * l[1]; wl[1] = w[2] * l[0] - w[0] * l[2]; wl[2] = w[0] * l[1] - w[1] * l[0];
                t[0] = (r[0] * wl[0] + r[3] * wl[1] + r[6] * wl[2]) * iJ0;
                t[1] = (r[1] * wl[0] + r[4] * wl[1] + r[7] * wl[2]) * iJ1;
                t[2] = (r[2] * wl[0] + r[5] * wl[1] + r[8] * wl[2]) * iJ2;
                for (int i = 0; i < 3; i++) w1[i] = -(r[3 * i] * t[0] + r[3 * i + 1] * t[1] + r[3 * i + 2] * t[2]);
                double c0 = w1[1] * w[2] - w1[2] * w[1], c1 = w1[2] * w[0] - w1[0] * w[2], c2 = w1[0] * w[1] - w1[1] * w[0];
                v[0] = h * (w[0] + 0.5 * h * w1[0] + h * h / 12.0 * c0);
                v[1] = h * (w[1] + 0.5 * h * w1[1] + h * h / 12.0 * c1);
                v[2] = h * (w[2] + 0.5 * h * w1[2] + h * h / 12.0 * c2);
                double a2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
                int small = a2 < 1e-8;
                double a2s = small ? 1.0 : a2, a = sqrt(a2s), sh = sin(0.5 * a);
                double s1 = small ? 1.0 - a2 / 6.0 + a2 * a2 / 120.0 : sin(a) / a;
                double s2 = small ? 0.5 - a2 / 24.0 + a2 * a2 / 720.0 : 2.0 * sh * sh / a2s;
                double E[9];
                E[0] = 1 + s2 * (v[0] * v[0] - a2); E[1] = -s1 * v[2] + s2 * v[0] * v[1]; E[2] = s1 * v[1] + s2 * v[0] * v[2];
                E[3] = s1 * v[2] + s2 * v[1] * v[0]; E[4] = 1 + s2 * (v[1] * v[1] - a2); E[5] = -s1 * v[0] + s2 * v[1] * v[2];
                E[6] = -s1 * v[1] + s2 * v[2] * v[0]; E[7] = s1 * v[0] + s2 * v[2] * v[1]; E[8] = 1 + s2 * (v[2] * v[2] - a2);
                for (int i = 0; i < 3; i++)
                    for (int j = 0; j < 3; j++)
                        R[(3 * i + j) * n + b] = E[3 * i] * r[j] + E[3 * i + 1] * r[3 + j] + E[3 * i + 2] * r[6 + j];
            }
        }
    }
}
