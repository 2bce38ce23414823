"""The daemon fixture: start(**config) starts a daemon in one temporary
directory per test; all are stopped by their pids, and the directory
removed, when the test ends."""
import shutil
import tempfile

import pytest

from daemon_util import Daemon, config_text


@pytest.fixture
def daemon():
    d = tempfile.mkdtemp(prefix="tesserad-test-")
    started = []

    def start(**kw):
        dm = Daemon(d, config_text(d, **kw))
        started.append(dm)
        return dm

    yield start
    for dm in started:
        dm.stop()
    shutil.rmtree(d, ignore_errors=True)
