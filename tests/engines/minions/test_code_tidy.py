from coinfer.engines.minions.code_tidy import tidy_job_code

ALLOWED = {"re", "json", "minions"}


def test_annotations_and_unused_foreign_imports_go_and_the_code_still_means_the_same() -> None:
    code = (
        "from uuid import uuid4\nfrom typing import List\nimport re\n"
        "def prepare_jobs(documents: List[str], last_jobs, last_outputs) -> List[int]:\n"
        "    size: int = 3\n    return [re.escape(d) for d in documents][:size]\n"
    )
    tidy = tidy_job_code(code, ALLOWED)
    assert tidy.changes == ("function annotations", "unused import of uuid", "unused import of typing")
    scope: dict[str, object] = {}
    exec(tidy.code, scope)  # noqa: S102 - our own test code
    assert scope["prepare_jobs"](["a.b", "c"], [], []) == ["a\\.b", "c"]  # type: ignore[operator]
    assert "import re" in tidy.code and "uuid" not in tidy.code and "typing" not in tidy.code


def test_an_import_the_code_uses_is_kept_for_the_sandbox_to_refuse() -> None:
    code = "import os\ndef prepare_jobs(documents, last_jobs, last_outputs):\n    return os.listdir('.')\n"
    tidy = tidy_job_code(code, ALLOWED)
    assert tidy.code == code and tidy.changes == () and not tidy.problem


def test_a_class_annotation_keeps_its_import_and_nothing_is_added() -> None:
    code = "from typing import List\nclass J:\n    x: List[int]\ndef prepare_jobs(a, b, c):\n    return []\n"
    assert "from typing import List" in tidy_job_code(code, ALLOWED).code


def test_code_without_the_entry_point_is_a_problem_and_a_syntax_error_is_left_alone() -> None:
    assert "does not define prepare_jobs" in tidy_job_code("class E(Exception):\n    pass\n", ALLOWED).problem
    broken = "def prepare_jobs(:\n"
    assert tidy_job_code(broken, ALLOWED).code == broken and not tidy_job_code(broken, ALLOWED).problem


def test_a_bare_body_that_returns_is_wrapped_in_the_function_imports_above_it() -> None:
    code = "import re\ntasks = ['Which port?']\nreturn [re.escape(t) for t in tasks] + documents\n"
    tidy = tidy_job_code(code, ALLOWED)
    assert tidy.changes == ("a bare function body, wrapped in def prepare_jobs",)
    scope: dict[str, object] = {}
    exec(tidy.code, scope)  # noqa: S102 - our own test code
    assert scope["prepare_jobs"](["d"], [], []) == ["Which\\ port\\?", "d"]  # type: ignore[operator]
