"""What the default run leaves to the slow tier, and why: one list, applied by ``tests/conftest.py``.

The default run (``python -m pytest -n 2``, what CI runs) is meant to take at most ten minutes on two
cores from a clean clone. It keeps:

- every registered method's observed orders and invariants (``tests/test_integrators.py``), the
  golden values of the papers and, outside the sampled matrices, every test that costs under about
  1.5 s;
- every feature (option, executor, adjoint, output, message) through at least one test;
- of each generated matrix, a covering sample (:data:`COVER`): every value of each axis, or every
  pair of values of the named axes, in at least one case.

The slow tier (``python -m pytest -n 2 -m slow``; everything: ``-m "slow or not slow"``) holds the
rest: tests marked ``@pytest.mark.slow`` in their files, the entries of :data:`SLOW` below (each
with the default-run test that goes through the same code), and the cases of a matrix outside its
covering sample. Run it before changing the driver, a method, a kernel or an experiment.

An entry of :data:`SLOW` or :data:`COVER` that names no collected test is an error when its file is
collected, so a renamed test cannot leave the list silently.
"""

from __future__ import annotations

# nodeid (a whole test function, or one parametrized case) -> the default-run test that covers its code
SLOW: dict[str, str] = {
    # adaptive steps
    "tests/test_adaptive.py::test_fast_top_reaches_the_tolerance_within_a_factor_3[1e-06-exact_split_tj4(2)]":
        "the other pairs of the same test",
    "tests/test_adaptive.py::test_fast_top_reaches_the_tolerance_within_a_factor_3[1e-06-lie_taylor5(4)]":
        "the other pairs of the same test",
    "tests/test_adaptive.py::test_forward_mode_derivative_matches_the_exact_flow":
        "test_adaptive_grad.py::test_forward_mode_is_taken_by_itself_without_an_adjoint",
    "tests/test_simulate.py::test_gradient_matches_finite_differences":
        "test_simulate.py::test_grad_wrt_dt (jax.grad of a constant-step run against a finite difference) and "
        "test_exact.py::test_free_flow_gradients_match_finite_differences",
    "tests/test_simulate.py::test_traced_save_times_ending_at_t1_without_t1_or_of_integers":
        "test_simulate.py::test_traced_save_times_with_error_control_go_on_to_t1_as_concrete_ones (the same path)",
    "tests/test_adaptive_grad.py::test_jax_linearize_of_an_adaptive_run_works_with_the_direct_adjoint":
        "test_adaptive_grad.py::test_every_reverse_adjoint_equals_forward_mode_also_through_jit[adjoint0] "
        "(the direct adjoint in both modes)",
    # closures over traced values
    "tests/test_closures.py::test_derivatives_reach_an_event_level_the_condition_closes_over[adaptive-Fused-batch]":
        "its constant-Fused-batch case (the same event arrays through a fused run's custom derivative rule)",
    "tests/test_closures.py::test_derivatives_reach_an_event_level_the_condition_closes_over[adaptive-XLA-one]":
        "test_derivatives_reach_a_parameter_the_torque_closes_over[adaptive-XLA] (the recorded adaptive loop)",
    "tests/test_closures.py::test_derivatives_reach_an_event_level_the_condition_closes_over[constant-XLA-one]":
        "its constant-Fused-batch case (the same hoisted level; a run with an event takes the XLA loop's derivatives) "
        "and test_events.py::test_a_method_holding_arrays_polishes_its_events_and_differentiates_through_them "
        "(an event time under jax.jit(jax.grad) on the XLA loop)",
    # Buss
    "tests/test_buss.py::test_float32_keeps_momentum_and_orthogonality_for_a_million_steps[buss3_ep]":
        "the buss2p case (the same float32 scan)",
    "tests/test_buss.py::test_float32_keeps_momentum_and_orthogonality_for_a_million_steps[buss4]":
        "the buss2p case (the same float32 scan)",
    "tests/test_buss.py::test_float32_keeps_momentum_and_orthogonality_for_a_million_steps[lie_taylor5]":
        "the buss2p case (the same float32 scan)",
    # dense output
    "tests/test_dense_output.py::test_evaluate_converges_at_order_four[buss4]": "the rk4 case",
    "tests/test_dense_output.py::test_after_a_terminal_event_the_dense_output_holds_the_event_state[adaptive]":
        "its constant case (the event's state held after it) and test_kernels_adaptive_saved.py::"
        "test_every_kth_step_and_dense_output_with_an_event_as_the_xla_loop[True] (an error-controlled batch's dense "
        "output with a terminal event, past each body's event)",
    # energy projection
    "tests/test_energy_projection.py::test_degenerate_cases_have_finite_values_and_gradients[zero momentum]":
        "the other degenerate cases",
    "tests/test_energy_projection.py::test_degenerate_cases_have_finite_values_and_gradients[sphere]":
        "the principal-axis and symmetric-body cases",
    "tests/test_energy_projection.py::test_ep_gradient_matches_finite_differences":
        "test_integrators.py::test_gradients_finite of an EP method in turn; test_simulate.py's gradient check",
    "tests/test_energy_projection.py::test_ep_float32[split4_231_ep]": "the buss2p_ep case",
    # the exact flow
    "tests/test_exact.py::test_axisymmetric_closed_form_equals_the_elliptic_flow[J1]": "the J0 case",
    "tests/test_exact.py::test_axisymmetric_closed_form_equals_the_elliptic_flow[J2]": "the J0 case",
    "tests/test_exact.py::test_axisymmetric_gradients_along_symmetry_keeping_perturbations":
        "test_free_flow_gradients_match_finite_differences",
    "tests/test_exact.py::test_forward_mode_equals_reverse_mode_past_a_half_period":
        "test_free_flow_gradients_match_finite_differences",
    # events
    "tests/test_events.py::test_batch_each_body_stops_at_its_own_event":
        "test_dense_output.py::test_after_a_terminal_event_the_dense_output_holds_the_event_state[constant] (a batch "
        "of constant steps, each body stopped at its own event); test_loop_matrix.py's batches with a terminal event",
    # example scripts
    "tests/test_examples.py::test_batch_of_bodies": "the README's batch example (test_readme.py)",
    "tests/test_examples.py::test_fit_damping": "test_torque_functions.py::test_damping_fit_recovers_c",
    # executors
    "tests/test_executors.py::test_executors_agree[buss2p]": "the dmv10 case; test_loop_matrix.py",
    "tests/test_executors.py::test_executors_agree[buss4]": "the dmv10 case; test_loop_matrix.py",
    "tests/test_executors.py::test_executors_agree[liemid_ea]": "the dmv10 case; test_loop_matrix.py",
    "tests/test_executors.py::test_executors_agree_on_adaptive_runs":
        "test_loop_matrix.py's error-controlled cases on every executor",
    # benchmarks run quick
    "tests/test_experiments.py::test_throughput_bench_quick":
        "test_cli.py::test_bench_throughput_makes_every_core_a_device_before_jax_starts (the command); "
        "test_numpy_baseline_is_the_same_update (its NumPy baseline); test_loop_matrix.py's blocked cases",
    "tests/test_experiments.py::test_bench_quick":
        "test_numpy_baseline_is_the_same_update (its NumPy baseline); test_buss.py (the methods it times)",
    # fitting
    "tests/test_fitting.py::test_fit_recovers_the_moments":
        "test_torque_functions.py::test_damping_fit_recovers_c (an optax fit through simulate)",
    "tests/test_fitting.py::test_loss_gradient_equals_finite_differences":
        "test_simulate.py::test_gradient_matches_finite_differences (the same reverse-mode scan)",
    "tests/test_fitting.py::test_sensitivity_matches_finite_differences":
        "test_simulate.py::test_gradient_matches_finite_differences (the same reverse-mode scan)",
    # high order
    "tests/test_high_order.py::test_orders_on_the_heavy_top[exact_split_kl6-6-ns2]":
        "the other case; the generic orders of exact_split_kl8",
    "tests/test_high_order.py::test_orders_on_the_heavy_top[rkmk4-4-ns3]": "test_integrators.py's orders of rkmk4",
    # the generic checks each method takes in turn: the costliest compilations
    **{f"tests/test_integrators.py::test_gradients_finite[{n}]":
       "the cheaper methods' gradient checks; every method's orders and invariants"
       for n in ("buss1", "buss3", "buss4", "liemid", "liemid_e2", "liemid_ea_tj4", "simo_wong", "split2_231")},
    **{f"tests/test_integrators.py::test_jit_vmap_agree[{n}]":
       "the cheaper methods' batch checks; test_loop_matrix.py"
       for n in ("aba864", "exact_split", "exact_split_kl8", "lie_taylor5", "liemid_ea", "liemid_i", "saba2")},
    # kernels
    "tests/test_kernels.py::test_a_fused_event_time_differentiates_as_the_xla_loops":
        "test_gradients_come_from_the_reference[rk4-user]; test_events.py::test_flip_time_gradient_matches_differences",
    **{f"tests/test_kernels.py::test_a_kernel_with_an_event_equals_the_xla_loop[{c}]":
       "the rk4 float32 and split2_231 cases; test_loop_matrix.py's fused cases"
       for c in ("rk4-free-float64", "buss4-gravity-float64", "rkmk8-user-float64", "dmv-free-float64")},
    "tests/test_kernels.py::test_gradients_come_from_the_reference[rk4-gravity]": "the rk4-user case",
    **{f"tests/test_kernels.py::test_rkmk8_kernel_at_large_steps[{c}]": "the user-f64 case"
       for c in ("free-f64", "gravity-f64", "gravity_gradient-f32", "gravity_gradient-f64", "poly-f64")},
    "tests/test_kernels.py::test_two_cpu_devices_one_launch_each":
        "test_sharding.py (several devices); test_a_cpu_batch_is_split_over_the_cores (the kernel's split)",
    "tests/test_kernels.py::test_a_cpu_batch_is_split_over_the_cores[f32]":
        "the f64 case (the same split); test_kernel_restates_the_method's float32 case (a kernel in float32)",
    "tests/test_kernels.py::test_jax_vmap_over_a_torque_parameter_and_an_event_level_runs_each_element[adaptive]":
        "its constant case (the same mapped custom call, kernels._common.jax_kernel, which the adaptive launch "
        "takes too)",
    # kernels with error control
    "tests/test_kernels_adaptive.py::test_same_steps_as_xla[buss4(3)-gravity-1e-10]": "the cases at other tolerances",
    "tests/test_kernels_adaptive.py::test_same_steps_as_xla[rkmk8(5)-gravity-1e-10]": "the cases at other tolerances",
    "tests/test_kernels_adaptive.py::test_a_terminal_event_in_the_kernel_stops_each_body[rkmk8(5)]":
        "the buss4(3) case (the same kernel, another pair) and test_t_handle_flip_time_matches_the_exact_solution"
        "[rkmk8(5)] (this pair's terminal event in the kernel, each body stopped at its own flip)",
    # generated kernels
    "tests/test_kernels_generated.py::test_every_method_runs_generated[rkmk8(5)]":
        "the rkmk4 case (the same family); test_kernels.py::test_kernel_restates_the_method's rkmk8 case (the same "
        "step); test_a_method_written_outside_the_package_runs_fused_with_constant_steps (a pair's constant steps)",
    # pieces of the generated kernels
    "tests/test_kernels_pieces.py::test_a_pair_whose_norm_gives_nan_runs_on_both_loops_with_the_same_steps":
        "test_the_generated_controller_is_adapt (the kernel's controller: adapt's bits at a NaN error) and "
        "test_a_nonfinite_error_rejects_and_shrinks_the_step",
    # Laskar-Robutel and Blanes et al.
    "tests/test_near_integrable.py::test_order_2n_in_the_terms_linear_in_the_torque[aba1064-10-ns4]":
        "the aba864 case (the same code, other coefficients)",
    "tests/test_near_integrable.py::test_order_2n_in_the_terms_linear_in_the_torque[saba4-8-ns2]":
        "the sbab3 case; test_integrators.py's orders of saba2",
    "tests/test_near_integrable.py::test_order_2n_in_the_terms_linear_in_the_torque[saba2-4-ns0]":
        "test_integrators.py's orders of saba2 (the same observed order)",
    # Newton
    "tests/test_newton.py::test_liemid_i_trajectory_gradients": "test_implicit_gradient_equals_unrolled_and_fd",
    # files and signals
    "tests/test_outputs.py::test_ctrl_c_during_reproduce_leaves_nothing[15-143-terminated]": "the SIGINT case",
    # progress meters
    "tests/test_progress_kinds.py::test_constant_steps_fused_report_every_interval[frames]":
        "its final case (the same fused pieces and meter, the other output); the XLA frames cases",
    **{f"tests/test_progress_kinds.py::test_constant_steps_on_xla_report_every_interval[{c}]":
       "the frames-None and final-64 cases (the same pieces and meter: each output, one body and a batch)"
       for c in ("frames-64", "final-None")},
    # rotation views
    "tests/test_rotations.py::test_trajectory_views_of_a_batch": "test_trajectory_views",
    # simulate
    "tests/test_simulate.py::test_short_and_chunked_runs_give_the_same_frames":
        "test_chunk_frames_and_statistics_equal_the_traced_scan (the same chunks, the tests' XLA flags)",
    "tests/test_simulate.py::test_blocked_batch_is_identical_to_unblocked":
        "test_loop_matrix.py's blocked cases (to round-off)",
    # splittings
    **{f"tests/test_splitting_baselines.py::test_every_ordering_has_its_order_and_exact_momentum[{o}]":
       "the 123 and 321 orderings; test_integrators.py's split2_231 and split4_231"
       for o in ("132", "213", "231", "312")},
    # suggest
    "tests/test_suggest.py::test_a_satellite_whose_coarse_trial_runs_are_far_off": "test_choices_follow_the_facts_not_the_names",
    "tests/test_suggest.py::test_an_unseen_body_and_torque": "test_choices_follow_the_facts_not_the_names",
    # precision floors
    "tests/test_tolerance.py::test_a_float32_run_meets_the_local_floor[lie_taylor5(4)]":
        "the buss4(3) case (the same floor and law, another pair)",
    "tests/test_tolerance.py::test_a_calibrated_batch_whose_check_runs_stall_in_float32_keeps_its_prediction":
        "test_a_global_error_run_raised_to_the_floor_reports_the_error_its_law_predicts_there (one body)",
    # plain-function torques
    "tests/test_torque_functions.py::test_plain_function_gravity_matches_gravity_torque[lie_taylor5]": "the buss4 case",
    "tests/test_torque_functions.py::test_plain_function_gravity_matches_gravity_torque[liemid_ea]": "the buss4 case",
    # torque restatement
    "tests/test_transpile.py::test_restatement_equals_the_function[elementary-f64]": "the elementary-f32 case",
    "tests/test_transpile.py::test_fused_run_of_a_plain_function_equals_xla":
        "test_a_torque_with_a_loop_is_restated (a plain function's torque in a fused rkmk8 run, equal to XLA's); "
        "test_suggest.py::test_the_suggestion_runs_in_a_fused_kernel_where_one_exists (suggest names Fused for one)",
    # derivatives in the kernels
    "tests/test_kernels_backward.py::test_a_pair_that_carries_memory_is_differentiated_in_the_kernels[reverse]":
        "the same test's [forward] case and test_kernels_fixed_derivatives.py::"
        "test_reverse_mode_in_the_kernels_equals_the_xla_loop[buss2p] (the backward kernel's memory sweep)",
    "tests/test_kernels_backward.py::test_where_the_kernels_cannot_differentiate_the_xla_loop_does[reverse]":
        "the same test's [forward] case (the same refusal, the reference loop's derivative)",
    "tests/test_kernels_backward.py::test_save_time_derivative_is_the_reference_loops":
        "test_kernels_fixed_derivatives.py::test_reverse_mode_in_the_kernels_equals_the_xla_loop "
        "(a time's derivative from the reference loop inside the same kind of custom rule)",
    "tests/test_kernels_fixed_derivatives.py::test_forward_mode_in_the_kernels_equals_the_xla_loop[buss2p]":
        "the [rk4] case and test_kernels_backward.py::"
        "test_a_pair_that_carries_memory_is_differentiated_in_the_kernels[forward] (memory in forward mode)",
    "tests/test_kernels_adaptive_saved.py::test_the_automatic_choice_differentiates_saved_steps_on_xla":
        "test_kernels_adaptive_saved.py::test_derivatives_are_refused_with_the_remedy (the same refusal)",
    "tests/test_kernels_backward.py::test_checkpoints_recompute_the_states_between_them[buss4(3)-2500]":
        "the [rkmk8(5)-600] case (the stretches stepped again) and test_kernels_fixed_derivatives.py::"
        "test_frames_are_the_checkpoints_where_every_step_does_not_fit[buss2p-False] (a carried memory stepped to "
        "each checkpoint in reverse mode)",
    "tests/test_kernels_fixed_derivatives.py::test_frames_are_the_checkpoints_where_every_step_does_not_fit[rk4-False]":
        "the [rk4-True] case (the same path, with a torque that changes with time)",
    "tests/test_kernels_backward.py::test_forward_mode_in_the_kernels_equals_the_xla_loops":
        "test_kernels_backward.py::test_a_pair_that_carries_memory_is_differentiated_in_the_kernels[forward] "
        "(an error-controlled pair's tangents carried in the run, against the XLA loop) and "
        "test_kernels_fixed_derivatives.py::test_forward_mode_in_the_kernels_equals_the_xla_loop[rk4]",
    "tests/test_kernels_adaptive_saved.py::test_every_kth_step_and_dense_output_with_an_event_as_the_xla_loop[False]":
        "its [True] case (a terminal event: the same record and frames, and the crossing step's column)",
    "tests/test_kernels_backward.py::test_a_users_pair_is_differentiated_in_the_kernels":
        "test_kernels_pieces.py::test_a_differentiated_first_call_compiles_no_plain_kernel (this pair's gradient in "
        "the kernels) and test_gradient_in_the_kernels_equals_the_xla_loops (a pair's step derivative generated from "
        "its JAX code, against the XLA loop's)",
    "tests/test_kernels_fixed_derivatives.py::test_reverse_mode_in_the_kernels_equals_the_xla_loop[rk4]":
        "the buss2p case (the same backward pass, under jit and in the step's length) and "
        "test_frames_are_the_checkpoints_where_every_step_does_not_fit[rk4-True] (rk4's reverse mode in the kernels)",
    # the heaviest of the default run whose code other cases of the same test take
    "tests/test_suggest.py::test_a_float32_suggestion_meets_the_error_it_announces[slow_top-None-0.0001]":
        "the gravity_gradient, buss_torqued and free_body_hlw cases (the same float32 trial runs and check)",
    "tests/test_kernels_pieces.py::test_the_generated_event_location_is_the_xla_loops[rkmk8]":
        "the buss4 case (the same generated location, a fourth-order method's dense output)",
    "tests/test_adaptive.py::test_fast_top_reaches_the_tolerance_within_a_factor_3[1e-06-rkmk8(5,3)]":
        "the rkmk8(5) and buss4(3) cases at both tolerances",
    "tests/test_kernels_adaptive.py::test_t_handle_flip_time_matches_the_exact_solution[rkmk8(5,3)]":
        "the rkmk8(5) and buss4(3) cases (the same kernel, another pair)",
    "tests/test_kernels_adaptive.py::test_a_terminal_event_in_the_kernel_stops_each_body[rkmk8(5,3)]":
        "the buss4(3) case (the same kernel, another pair)",
}

# test function -> the axes (parameter names) whose values, or tuples of values, every kept case covers
COVER: dict[str, tuple[tuple[str, ...], ...]] = {
    # every kernel, every torque kind and both dtypes at least once
    "tests/test_kernels.py::test_kernel_restates_the_method": (("name",), ("torque",), ("dtype",)),
    # every pair of options
    "tests/test_loop_matrix.py::test_one_body_agrees_with_the_exact_flow":
        (("ctrl", "save"), ("ctrl", "event"), ("save", "event")),
    # every bad input once and every transformation once (one check, eqx.error_if, per argument)
    "tests/test_traced_checks.py::test_bad_input_raises_the_documented_error": (("case",), ("transform",)),
    # every executor with both controllers; every SaveAt and event
    "tests/test_loop_matrix.py::test_batch_and_executors_agree_with_one_body_or_refuse":
        (("ctrl", "executor"), ("save",), ("event",)),
}


def _values(item, axes):
    p = item.callspec.params
    return tuple(str(p[a]) for a in axes)


def covering_sample(items, specs) -> set:
    """The cases kept: chosen greedily, each the one that covers the most uncovered tuples (the first
    of equals, in collection order), until every tuple of every spec is covered."""
    need = {(k, _values(it, axes)) for it in items for k, axes in enumerate(specs)}
    keep = []
    while need:
        gain = [len({(k, _values(it, axes)) for k, axes in enumerate(specs)} & need) for it in items]
        best = max(range(len(items)), key=lambda i: (gain[i], -i))
        keep.append(items[best])
        need -= {(k, _values(items[best], axes)) for k, axes in enumerate(specs)}
    return {it.nodeid for it in keep}


def apply(items, slow_mark, whole_files=None) -> None:
    """Mark the items :data:`SLOW` and :data:`COVER` leave to the slow tier; raise on an entry that
    names nothing in a file collected whole (``whole_files``: all files of ``items`` if None)."""
    files = {it.nodeid.split("::")[0] for it in items} if whole_files is None else set(whole_files)
    seen = set()
    for it in items:
        for key in (it.nodeid, it.nodeid.split("[")[0]):
            if key in SLOW:
                seen.add(key)
                it.add_marker(slow_mark)
    for fn, specs in COVER.items():
        cases = [it for it in items if it.nodeid.split("[")[0] == fn and not it.get_closest_marker("slow")]
        if cases:
            seen.add(fn)
            kept = covering_sample(cases, specs)
            for it in cases:
                if it.nodeid not in kept:
                    it.add_marker(slow_mark)
    stale = [k for k in (*SLOW, *COVER) if k.split("::")[0] in files and k not in seen]
    if stale:
        raise ValueError(f"tests/tiers.py names tests that were not collected: {stale}")
