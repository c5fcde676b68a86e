"""The authors' job files as ``--workload DIR`` and their generator (Wang et al.'s
``online/job_master.py``), by hand and against bad files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from grouper.cli.main import main
from grouper.common.errors import ConfigError
from grouper.workloads.authors_jobs import (
    AUTHORS_CONTENTION,
    TEMPLATES,
    load_job_dir,
    microsoft_jobs,
    write_job_dir,
)
from grouper.workloads.jobmix import load_jobmix

VGG = {"dnn": "vgg16", "model_size": 526.4, "train_mem": 4527, "fw_time": 36, "bw_time": 54}


def job(**over: object) -> dict:
    return {**VGG, "start_time": 1500, "nworkers": 4, "iters": 20, "job_id": 7, **over}


def write(tmp: Path, jobs: dict[str, object]) -> Path:
    for name, data in jobs.items():
        text = data if isinstance(data, str) else json.dumps(data)
        (tmp / name).write_text(text)
    return tmp


def test_a_directory_of_job_files_is_read_in_file_number_order_in_seconds(tmp_path):
    yaml_file = "dnn: lstm\nmodel_size: 251.8\ntrain_mem: 2751\nfw_time: 32\nbw_time: 47\n"
    yaml_file += "start_time: 0\nnworkers: 1\niters: 10\nlr: 0.1\n"  # their yaml.safe_dump
    d = write(tmp_path, {"job_10.json": job(), "job_2.json": yaml_file, "notes.txt": "x"})
    mix = load_jobmix(str(d))
    assert [j.model.name for j in mix.jobs] == ["lstm", "vgg16"]  # 2 before 10
    vgg = mix.jobs[1]
    assert (vgg.id, vgg.arrival, vgg.gpus, vgg.iterations) == (1, 1.5, 4, 20)
    assert vgg.model.t_f == pytest.approx(0.036) and vgg.model.t_b == pytest.approx(0.054)
    assert vgg.model.bytes == pytest.approx(526.4e6) and vgg.model.memory_mb == 4527
    assert mix.contention == AUTHORS_CONTENTION and mix.contention.a == 0
    assert (mix.cluster.servers, mix.cluster.gpus_per_server) == (16, 4)
    assert mix.cluster.gpu_memory_mb == 32768


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (job(fw_time="fast"), "job_3.json.fw_time"),
        ({k: v for k, v in job().items() if k != "iters"}, "job_3.json.iters"),
        (job(nworkers=65), "job_3.json.nworkers"),
        (job(nworkers=2.5), "job_3.json.nworkers"),
        (job(train_mem=40000), "job_3.json.train_mem"),
        (job(start_time=-1), "job_3.json.start_time"),
        (job(model_size=0), "job_3.json.model_size"),
        (job(fw_time=0, bw_time=0), "job_3.json.bw_time"),
        (job(dnn="../x"), "job_3.json.dnn"),
        ("[1, 2]", "job_3.json"),
        ("{not json", "job_3.json"),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_and_the_field(tmp_path, data, where):
    d = write(tmp_path, {"job_0.json": job(), "job_3.json": data})
    with pytest.raises(ConfigError) as exc:
        load_job_dir(d)
    assert exc.value.path.split(":")[0] == where  # a parse error adds ": line N"
    assert "\n" not in str(exc.value)


def test_a_directory_without_job_files_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no job_"):
        load_jobmix(str(tmp_path))


def test_the_cli_refuses_a_bad_file_in_one_line_with_exit_2(tmp_path, capsys):
    d = write(tmp_path, {"job_0.json": job(iters=0)})
    assert main(["simulate", "--mode", "jobs", "--workload", str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "job_0.json.iters" in err


def test_the_generator_follows_microsoft_generate():
    jobs = microsoft_jobs(seed=3)
    assert Counter(j["nworkers"] for j in jobs) == {1: 80, 2: 14, 4: 26, 8: 30, 16: 8, 32: 2}
    assert [j["nworkers"] for j in jobs] == sorted(j["nworkers"] for j in jobs)  # their ids
    assert all(10 <= j["iters"] <= 60 for j in jobs)
    assert all(0 <= j["start_time"] < 12000 and isinstance(j["start_time"], int) for j in jobs)
    assert all({k: j[k] for k in TEMPLATES[j["dnn"]]} == TEMPLATES[j["dnn"]] for j in jobs)
    assert set(Counter(j["dnn"] for j in jobs)) == set(TEMPLATES)
    assert microsoft_jobs(seed=3) == jobs and microsoft_jobs(seed=4) != jobs
    assert len(microsoft_jobs(seed=1, jobs=80)) == 80
    with pytest.raises(ConfigError):
        microsoft_jobs(jobs=100)


def test_generated_sets_round_trip_through_their_files(tmp_path):
    records = microsoft_jobs(seed=2)
    mix = load_job_dir(write_job_dir(records, tmp_path / "set"))
    assert len(mix.jobs) == 160
    for rec, j in zip(records, mix.jobs, strict=True):
        assert (j.gpus, j.iterations, j.model.name) == (rec["nworkers"], rec["iters"], rec["dnn"])
        assert j.arrival == pytest.approx(rec["start_time"] / 1000)
