"""One-off studies of the cost model and the search: the lab, kept apart from the product's benchmark.

Run from the checkout (research is not installed): `.venv/bin/python -m research.<name> ...`;
each module's docstring gives its options. Results go to `research/results/` by default and are
filed by platform, `research/results/<platform>/` (research/results/README.md indexes them).
Research may import `benchmarks` (harness, suite); `benchmarks` never imports research.

    continual          RDU data efficiency and continual transfer across platforms (forgetting matrix)
    cost_model_eval    held-out ranking: the student vs TenSet-MLP vs TVM's XGBoost vs random
    cost_model_speed   student size and prediction throughput, features included, on this CPU
    estimate_gap       a kept library's kernels alone against its whole call, beside the tuner's estimate
    input_sensitivity  how much a tuned kernel's run time depends on its input values
    loop_profile       where a tuning run's wall time goes (build, run, search, update) per cost model
    per_task           what each search found, kernel by kernel, from a run.py results file
    pretrain_finetune  whether pretraining on other CPUs' records, then fine-tuning here, ranks better
    retime             times a suite run's kept libraries and onnxruntime again, side by side
    run                tuning comparisons: models x budgets x cost models, tuned/untuned/onnxruntime latency
    search_replay      a tuning search replayed offline on collected records, cost model by cost model
    search_round_cost  what the `tcl` cost model costs a real search round (recorded, then replayed)
    student_sweep      student sizes and training recipes against held-out ranking quality
    top_k_by_task      which tasks cost a student its top-k on one model
    top_k_density      how top-k moves with the number of candidates measured per task
    top_k_gap          which tasks make the top-k gap between two students
    top_k_headroom     how far each task's best stands out: what a dataset's top-k can say
"""
