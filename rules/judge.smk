# One job per (judge, shard): the judge's model loads once and scores every cell of the judge (modality x
# transcript source x prompt x condition) on the shard's dialogues, writing one score table per cell into the job's
# score folder, its one output besides the index: a plan's outputs are per job, not per cell (docs/benchmarks.md).
# Each judge has a rule of its own, `judge_<name>`, made here from one template: its shard index is of the judge's
# shard count (lalm_judge.workflow.sizing), its conda env and resources its own (`judges.<name>.schedule`): on SLURM
# a card with the memory it needs (`constraint`), twice the runtime on each retry, and an early SIGTERM before its
# limit so that it stops at a commit (`slurm_extra`).
# Requests already in the judge's request cache (`evaluation.cache_dir`) are not computed again: a rerun because a
# cell was added (a prompt, a condition: the `params` trigger, the folder is emptied first), a dialogue joined the
# shard, or the job was killed computes only the new requests (lalm_judge.judging.job). The job also writes the
# index of its score tables, which the aggregates read (`get_score_indexes`).
for judge in PLAN.judges():

    rule:
        name:
            f"judge_{judge}"
        input:
            shard_index=get_shard_index(judge),
            prompts=get_judge_prompt_files(judge),
        output:
            scores=directory(get_judge_score_dir(judge)),
            score_index=get_judge_score_index(judge),
        log:
            job=f"logs/scores/{judge}/shard{{shard}}.log",
            requests=f"logs/scores/{judge}/shard{{shard}}.requests.json",
        benchmark:
            f"benchmarks/scores/{judge}/shard{{shard}}.tsv"
        params:
            judge=judge,
            spec=get_judge_spec(judge),
            cells=get_judge_cells(judge),
            score_paths=get_judge_score_paths(judge),
            control_conditions=get_judge_control_conditions(judge),
            control_dialogues=get_judge_control_dialogues(judge),
            controls=get_control_settings(get_judge_control_conditions(judge)),
            audio_sample_rate=config["evaluation"]["audio_sample_rate"],
            cache_dir=config["evaluation"]["cache_dir"],
            seed=SEED,
            code=get_code_digest("judge_shard"),
        threads: get_judge_resources(judge)["threads"]
        resources:
            gpu=get_judge_resources(judge)["gpu"],
            gpu_model=get_judge_resources(judge)["gpu_model"],
            mem_mb=get_judge_resources(judge)["mem_mb"],
            runtime=get_judge_runtime(judge),
            cpus_per_gpu=get_judge_resources(judge)["cpus_per_gpu"],
            constraint=get_judge_constraint(judge),
            slurm_extra=get_judge_slurm_extra(judge),
        conda:
            get_judge_conda_env(judge)
        script:
            "../workflow_scripts/judge_shard.py"
