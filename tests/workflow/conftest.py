"""The finished test workflow (tests/config/test.yaml), run once per session and shared by the modules that
inspect it, rerun it or judge its exported benchmark."""

import pytest

from tests.support.workflow import prepare_workdir, snakemake


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("workflow")
    configfile = prepare_workdir(workdir)
    snakemake(workdir, configfile, "--cores", "2", timeout_s=1500)
    return workdir, configfile
