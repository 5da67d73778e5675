from polyrl.types import Completion, Episode, ExecResult, Job, JobStatus, Score, Task, Turn


def test_task_roundtrip():
    t = Task("HumanEval/0", "code/humaneval-v1", "test", 2, [{"role": "user", "content": "x"}], "ref", {"a": 1})
    assert Task.from_dict(t.to_dict()) == t


def test_completion_and_score_roundtrip():
    c = Completion("t1", "hi", 3, [1, 2], [5], [-0.5], "length", 7)
    assert Completion.from_dict(c.to_dict()) == c
    s = Score(0.5, {"tests_passed": 0.5}, None, "", False)
    assert Score.from_dict(s.to_dict()) == s and s.ok
    assert not Score(0.0, error="SandboxError").ok


def test_episode_flat_tokens_masks_environment_turns():
    ep = Episode(
        "t",
        [Turn("assistant", "ls", [1, 2], [-0.1, -0.2], True), Turn("user", "a.txt", [3, 4, 5]), Turn("assistant", "done", [6], [-0.3], True)],
    )
    ids, lps, mask = ep.flat_tokens()
    assert ids == [1, 2, 3, 4, 5, 6]
    assert mask == [1, 1, 0, 0, 0, 1]
    assert lps == [-0.1, -0.2, 0.0, 0.0, 0.0, -0.3]
    assert Episode.from_dict(ep.to_dict()) == ep
    assert ep.text == "ls\ndone"


def test_job_status_is_str_enum():
    j = Job("1", "score", status=JobStatus.RUNNING)
    d = j.to_dict()
    assert d["status"] == "running"
    assert Job.from_dict(d).status is JobStatus.RUNNING


def test_exec_result_ok():
    assert ExecResult(["true"], exit_code=0).ok
    assert not ExecResult(["x"], exit_code=0, limit_hit="timeout_s").ok
