# One job per (judge cell, shard): the model loads once and scores every sample of the shard.
# Resources come from the judge registry (config `judges.<name>.resources`).
rule judge_shard:
    input:
        shard_index="results/manifests/shards/shard{shard}.json",
        prompt=get_prompt_file,
    output:
        scores="results/scores/{judge}/{modality}-{source}/{prompt}/{condition}/shard{shard}.parquet",
    log:
        "logs/scores/{judge}/{modality}-{source}/{prompt}/{condition}/shard{shard}.log",
    benchmark:
        "benchmarks/scores/{judge}/{modality}-{source}/{prompt}/{condition}/shard{shard}.tsv"
    params:
        spec=get_judge_spec,
        audio_sample_rate=config["evaluation"]["audio_sample_rate"],
        seed=SEED,
    threads: get_judge_resource("threads")
    resources:
        gpu=get_judge_resource("gpu"),
        gpu_model=get_judge_resource("gpu_model"),
        mem_mb=get_judge_resource("mem_mb"),
        runtime=get_judge_resource("runtime"),
        cpus_per_gpu=get_judge_resource("cpus_per_gpu"),
    conda:
        get_judge_conda_env
    script:
        "../workflow_scripts/judge_shard.py"
