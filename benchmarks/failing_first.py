"""Issue 15's tests against the code before each fix: do they fail there?

The reliability fixes landed with their tests in the same commits, so "this test fails
without the fix" was never shown at the time. This script shows it after the fact, from
git history alone: for each fix, a git worktree holds the package as it was *before* the
fix (the fix commit's parent) with the tests as they were *in* the fix commit, and each
test the fix added runs alone, in its own pytest process, under a time limit (a fix for a
hang fails by hanging). The restructure was split over three commits, of which the first
two (82f2c51, 116cefe) removed ``protocol.py`` before ``acac517`` added the package, so
the package "before" it is 713a64d, the last whose ``ap-gym run`` works. Tests written
after the fixes through interfaces every version has (``tests/test_cli.py``, the server
with its default limits) run against the package before any of them. Outcomes per test:

* ``failed``: an assertion failed, an expected error was not raised, or the old code
  raised a raw exception where the test wants a clear one: the fault, shown;
* ``hung``: no result within the limit: the fault (a hang), shown;
* ``API absent``: the old code lacks a name the test uses (ImportError, AttributeError on
  an ap-gym object, an unknown fixture or keyword): the test cannot run there, so it shows
  nothing about the fault; said as such, never counted as shown;
* ``passed``: the test does not tell the old code from the new.

It needs the git history (a clone, not an sdist) and a venv that runs the current suite.

    python benchmarks/failing_first.py [--only 36db218] [--limit 300]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._bench import emit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Fix:
    """One fix: the tests it added (``path::function``, every parameter), and the commits
    whose package (``before``) and tests (``tests``) the check uses."""

    items: str
    what: str
    before: str
    tests: str
    nodes: tuple[str, ...]


# The commit before each fix is its parent; the tests are the fix commit's own.
FIXES = (
    Fix("4, 12", "served models: deadlines; client errors answered 4xx", "acac517", "6818261", (
        "tests/backbones/test_openai.py::test_an_overall_deadline_cuts_off_a_slow_or_silent_server",
        "tests/backbones/test_openai.py::test_a_hanging_model_list_fails_fast_at_start",
        "tests/backbones/test_server.py::test_client_errors_are_answered_4xx")),
    Fix("1, 3, 5, 6, 7, 9, 11, 13", "snapshots, stores, watchdog, signals, scores", "6818261", "36db218", (
        "tests/policies/test_memory_policies.py::test_a_bad_snapshot_is_refused_before_the_live_memory_is_touched",
        "tests/policies/test_memory_policies.py::test_a_snapshot_of_another_design_is_refused",
        "tests/memory/test_index.py::test_an_index_file_of_another_database_is_never_used",
        "tests/envs/test_scienceworld.py::test_a_hung_jvm_is_killed_by_the_watchdog_and_reset_recovers",
        "tests/protocol/executors/test_local.py::test_sigterm_and_sigint_stop_cleanly_and_say_how_to_resume",
        "tests/backbones/test_server.py::test_a_body_that_never_arrives_is_answered_408",
        "tests/envs/test_base.py::test_a_score_that_is_not_a_finite_number_is_an_infrastructure_failure",
        "tests/protocol/test_results.py::test_a_setting_with_no_valid_episode_reports_no_rate",
        "tests/memory/test_store.py::test_structural_damage_is_a_store_error",
        "tests/memory/test_store.py::test_flipped_bits_never_escape_as_raw_sqlite_errors",
        "tests/memory/test_store.py::test_a_read_only_directory_is_named_as_such",
        "tests/memory/test_store.py::test_rows_added_by_another_handle_are_found",
        "tests/memory/test_store.py::test_a_frozen_open_sees_rows_still_in_the_wal_and_writes_nothing",
        "tests/test_rollout.py::test_random_policy_episodes_do_not_depend_on_what_ran_before")),
    Fix("16", "game generation in a helper process", "36db218", "021b872", (
        "tests/envs/test_isolated.py::test_a_crashing_helper_is_retried_then_reported",
        "tests/envs/test_isolated.py::test_a_game_is_generated_in_the_helper_on_an_empty_cache")),
    Fix("5, 14", "ALFWorld's engine in a recycled child process", "0b3a826^", "0b3a826", (
        "tests/envs/test_alfworld.py::test_engine_runs_in_its_own_process_and_is_recycled",
        "tests/envs/test_alfworld.py::test_a_crashed_or_hung_engine_is_an_infrastructure_error_and_reset_recovers")),
    Fix("14", "ScienceWorld's JVM recycled", "d6e585f^", "d6e585f", (
        "tests/envs/test_scienceworld.py::test_the_jvm_is_recycled_after_its_reset_budget",)),
    Fix("16", "cache entries published once, never deleted under a reader", "9a7529f^", "9a7529f", (
        "tests/test_paths.py::test_a_complete_entry_is_kept_and_ours_discarded",
        "tests/test_paths.py::test_an_incomplete_entry_is_replaced",
        "tests/test_paths.py::test_builders_racing_on_an_empty_cache_never_pull_an_entry_from_under_a_reader")),
    Fix("2, 6, 8, 10", "restructure: config validation, quarantined lines, workers die with the driver",
        "713a64d", "acac517", (
            "tests/protocol/test_config.py::test_bad_configs_are_refused_with_the_key_named",
            "tests/protocol/test_config.py::test_an_empty_or_malformed_file_is_refused",
            "tests/protocol/test_config.py::test_a_moved_run_resumes_and_a_different_one_is_refused",
            "tests/protocol/test_results.py::test_a_damaged_middle_line_is_quarantined_and_every_valid_line_kept",
            "tests/protocol/executors/test_local.py::test_worker_processes_die_with_a_killed_driver")),
    Fix("5, 16", "an engine child's start-up has its own budget", "da186bb^", "da186bb", (
        "tests/envs/test_engine_process.py::test_a_childs_start_up_does_not_count_against_its_first_call",
        "tests/envs/test_engine_process.py::test_a_child_that_is_never_ready_is_killed_at_its_start_budget",
        "tests/envs/test_engine_process.py::test_an_engine_that_cannot_be_built_says_why")),
    Fix("15", "the audit names a setting it could not read", "713a64d", "2549f58", (
        "tests/report/test_write_report.py::test_a_setting_whose_memory_cannot_be_read_is_named_not_dropped",)),
    Fix("6", "a worker orphaned while it starts exits at once", "28fbf6a^", "28fbf6a", (
        "tests/envs/test_engine_process.py::test_a_child_orphaned_while_it_starts_exits_at_once",)),
    Fix("16", "a backslash or newline in a TextWorld action reaches the game, not frotz", "f747e24^", "f747e24", (
        "tests/envs/test_textworld.py::test_backslashes_and_newlines_in_an_action_reach_the_game_not_the_interpreter",)),
    # Written after the fixes through interfaces every version has (see the docstring).
    Fix("2, 4, 8, 10, 15", "the CLI's contracts (run, report) on bad input", "713a64d", "fc3e21d", (
        "tests/test_cli.py::test_a_bad_config_exits_2_naming_the_key_and_writes_nothing",
        "tests/test_cli.py::test_a_run_name_cannot_leave_out",
        "tests/test_cli.py::test_an_empty_config_file_is_refused",
        "tests/test_cli.py::test_resume_keeps_the_valid_lines_after_a_damaged_one",
        "tests/test_cli.py::test_report_names_a_setting_whose_memory_cannot_be_read",
        "tests/test_cli.py::test_a_hung_model_server_fails_the_run_at_start_within_its_deadline")),
    Fix("7, 12", "a server with its default limits", "acac517", "fc3e21d", (
        "tests/backbones/test_server.py::test_a_server_with_its_default_limits_answers_bad_chat_requests_400",)),
    # Issue 29: the package before this session's changes, the tests of the training commit.
    Fix("29", "a plain script on an empty cache; async vector envs", "dad7b4c", "2e3a325", (
        "tests/test_readme.py::test_ten_lines_runs_as_a_plain_script_on_an_empty_cache",
        "tests/test_vector.py::test_async_gives_the_same_observations_as_sync",
        "tests/test_vector.py::test_textworld_async_equals_sync",
        "tests/test_readme.py::test_the_vault_gives_admissible_commands_on_every_step")),
    # Issue 32: each commit's tests against its parent.
    Fix("32", "exposure, substitutions, bad input, engines, orphans", "54a2384^", "54a2384", (
        "tests/view/test_index.py::test_the_viewer_answers_only_its_own_host_name",
        "tests/view/test_index.py::test_static_never_overwrites_a_directory_it_did_not_write",
        "tests/view/test_index.py::test_a_damaged_run_is_shown_without_its_damaged_lines",
        "tests/view/test_index.py::test_a_damaged_config_json_is_named_as_damaged",
        "tests/view/test_index.py::test_the_api_answers_and_refuses_clearly",
        "tests/backbones/test_openai.py::test_the_scoring_probe_names_what_the_server_answered",
        "tests/backbones/test_openai.py::test_an_outage_during_the_probe_is_not_taken_for_a_verdict",
        "tests/backbones/test_openai.py::test_nan_scores_from_a_server_are_an_infrastructure_failure",
        "tests/backbones/test_openai.py::test_a_key_goes_only_to_https_or_loopback",
        "tests/backbones/test_openai.py::test_retry_after_is_honoured_and_capped",
        "tests/backbones/test_trainable.py::test_generate_stays_inside_the_context_and_its_deadline",
        "tests/backbones/test_trainable.py::test_nan_scores_are_an_infrastructure_failure_of_the_step",
        "tests/protocol/test_loop.py::test_run_writes_results_and_refuses_a_changed_config",
        "tests/envs/test_textworld.py::test_a_native_crash_of_the_engine_is_contained",
        "tests/envs/test_scienceworld.py::test_the_jvm_runs_with_a_heap_limit",
        "tests/envs/test_scienceworld.py::test_a_jvm_that_never_starts_is_killed_at_the_launch_deadline",
        "tests/protocol/test_skills.py::test_judge_filters_with_its_own_backbone_and_skills_feed_the_frozen_layer",
        "tests/protocol/test_orphans.py::test_a_finished_or_killed_run_with_two_workers_leaves_no_orphans")),
    Fix("32", "a failed first reset, a damaged schema_version, damaged rejections", "d5d29a3^", "d5d29a3", (
        "tests/envs/test_base.py::test_a_registered_env_steps_after_a_first_reset_that_raised",
        "tests/memory/test_store.py::test_a_schema_version_that_is_no_number_is_named_as_damage",
        "tests/protocol/test_skills.py::test_export_skips_damaged_rejections")),
    # Issue 42: each fix's tests against its parent.
    Fix("42: 1", "a refusal is the prompt's fault only when the prompt did not fit", "0976956^", "0976956", (
        "tests/backbones/test_openai.py::test_a_refusal_is_the_prompts_fault_only_when_the_prompt_did_not_fit",)),
    Fix("42: 2", "a kill while a memory is created", "d85f9f7^", "d85f9f7", (
        "tests/memory/test_store.py::test_a_kill_while_the_memory_is_created_never_blocks_a_resume",
        "tests/memory/test_store.py::test_a_memory_an_older_ap_gym_left_half_created_is_finished")),
    Fix("42: 3", "engines outlive the thread that started them", "c6bc98e^", "c6bc98e", (
        "tests/envs/test_engine_process.py::test_an_engine_started_in_a_short_lived_thread_outlives_the_thread",)),
    Fix("42: 4", "credentials in a URL", "58c0d59^", "58c0d59", (
        "tests/test_cli.py::test_a_url_with_credentials_is_refused_and_never_written_or_shown",)),
    Fix("42: 5", "a misfiled line, a deleted run under a live viewer", "0e17a74^", "8e7db2b", (
        "tests/view/test_live.py::test_a_misfiled_line_and_a_deleted_run_are_answered_clearly",)),
    Fix("42: 6", "an async vector env after a failure", "944a76b^", "944a76b", (
        "tests/test_vector.py::test_an_async_sub_env_that_fails_is_an_infrastructure_error_and_reset_recovers",)),
    Fix("42: 7, 8, 9", "Ctrl-C, bad sizes, imports edges", "0e17a74^", "0e17a74", (
        "tests/test_cli.py::test_ctrl_c_ends_a_command_with_one_line_and_no_traceback",
        "tests/test_bad_sizes.py",
        "tests/protocol/test_imports.py")),
    Fix("42: 10", "Ray workers at the driver's priority on a busy machine", "36ddb0c^", "36ddb0c", (
        "tests/protocol/executors/test_ray.py::test_a_local_instance_runs_its_workers_at_the_drivers_niceness",
        "tests/protocol/executors/test_ray.py::test_a_cluster_whose_workers_run_at_a_lower_priority_is_named")),
    # Issue 51: each fix's tests against its parent.
    Fix("51: 1", "one writer per run (an OS lock)", "e10d63e^", "e10d63e", (
        "tests/protocol/test_loop.py::test_a_second_writer_of_a_run_is_refused_naming_the_first",)),
    Fix("51: 2", "numbers that cannot be numbers, lines written twice, bytes that are not UTF-8", "c42ef14^", "c42ef14", (
        "tests/protocol/test_results.py::test_an_impossible_number_or_a_boolean_as_text_is_damage_not_a_crash_or_a_value",
        "tests/protocol/test_results.py::test_a_line_written_twice_counts_once",
        "tests/protocol/test_results.py::test_a_worlds_file_with_bytes_that_are_not_utf8_loses_only_that_line")),
    Fix("51: 3", "a run on a retrained checkpoint; a half-saved checkpoint", "13486bf^", "13486bf", (
        "tests/protocol/test_loop.py::test_a_run_on_a_checkpoint_refuses_to_resume_on_other_weights",
        "tests/training/test_trainer.py::test_a_half_saved_checkpoint_is_never_taken")),
    Fix("51: 4", "served log-probabilities checked; a deadline said to be one", "c54458f^", "c54458f", (
        "tests/backbones/test_search.py::test_a_served_log_probability_that_cannot_be_one_is_a_faulty_server_never_a_pick",
        "tests/backbones/test_search.py::test_a_short_deadline_is_said_to_be_a_deadline_not_an_outage")),
    Fix("51: 5", "viewer inputs: odd logs, a FIFO, an index path that is a directory, any file", "57869b1^", "57869b1", (
        "tests/view/test_training.py::test_a_log_whose_rule_is_a_number_or_a_fifo_named_like_a_log_hides_nothing",
        "tests/view/test_training.py::test_a_file_that_is_not_a_training_log_is_refused_with_what_view_takes",
        "tests/view/test_index.py::test_a_directory_in_the_index_files_place_sends_the_index_to_the_cache")),
    Fix("51: 5", "viewer queries bounded", "6643633^", "6643633", (
        "tests/view/test_index.py::test_the_viewers_query_is_bounded_and_refused_with_a_400_that_says_the_limit",)),
    Fix("51: 5", "a same-length edit far before a file's end", "96bd3dc^", "96bd3dc", (
        "tests/view/test_scale.py::test_a_same_length_edit_far_before_the_end_is_seen",)),
    Fix("51: 5", "a full disk degrades the viewer", "a889ecd^", "a889ecd", (
        "tests/view/test_scale.py::test_a_full_disk_keeps_the_index_in_memory_with_a_warning",)),
    Fix("51: 2, 3", "what faults.py --only issue51 found: a copied line in the viewer's index, cut weights", "bc1dd39^",
        "bc1dd39", (
            "tests/view/test_index.py::test_a_line_written_twice_counts_once_in_the_index_as_in_every_reader",
            "tests/backbones/test_hf.py::test_a_model_directory_whose_weights_were_cut_is_a_clear_error")),
    Fix("51: 6", "left from 42: an interrupted store", "a6f51b0^", "a6f51b0", (
        "tests/memory/test_store.py::test_a_memory_left_with_only_some_of_its_tables_and_no_meta_is_finished",)),
    Fix("51: 6", "left from 42: closed envs, huge vector envs, non-text envs; lanes loading games", "46bf33a^", "46bf33a", (
        "tests/test_vector.py::test_a_closed_env_is_not_played_again_and_a_huge_vector_env_is_refused_at_once",
        "tests/training/test_tokens.py::test_play_tokens_refuses_an_env_that_is_not_a_text_env",
        "tests/envs/test_textworld.py::test_games_are_loaded_one_thread_at_a_time")),
    Fix("51: 6", "left from 42: an env left open at exit", "af53c42^", "af53c42", (
        "tests/envs/test_engine_process.py::test_an_env_left_open_at_exit_prints_no_traceback",)),
    Fix("51: 6", "messages: a forged running.json, randomise_exposure as a flag or text", "f5a2a73^", "f5a2a73", (
        "tests/protocol/test_results.py::test_a_forged_running_json_does_not_read_as_running",
        "tests/protocol/test_results.py::test_a_runs_lock_tells_a_live_writer_from_a_dead_one",
        "tests/protocol/test_config.py::test_randomise_exposure_is_a_probability_not_a_flag_or_text")),
    Fix("51: 6", "messages: a choice-only server", "6f59ba1^", "6f59ba1", (
        "tests/backbones/test_search.py::test_a_choice_only_server_is_told_to_use_choose_method_constrained",)),
)

API_ABSENT = re.compile(
    r"^(ImportError|ModuleNotFoundError)\b|^AttributeError: .*(ap_gym|module|has no attribute '_)|"
    r"fixture '.*' not found|unexpected keyword argument|^TypeError: .*(positional argument|required)")


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


# An editable install (``pip install -e .``, as make test does) adds a finder that serves
# any ``ap_gym.*`` module the old tree lacks from the *current* checkout, so a test of a
# package that did not exist yet would silently run today's code (and pass). This
# sitecustomize (``.ff_site``, first on the old tree's PYTHONPATH) removes that finder: a name the old
# package lacks is then an ImportError, as it should be.
_NO_EDITABLE = """import sys
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
"""


def run_test(tree: Path, node: str, limit_s: float) -> list[tuple[str, str, str, float]]:
    """``[(case, outcome, first line of the failure, seconds)]`` for one test function."""
    xml = tree / ".ff.xml"
    xml.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{tree / '.ff_site'}{os.pathsep}{tree}", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           f"--junitxml={xml}", node]
    t = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the JVMs and engine processes it started too
        proc.communicate()
        return [(node.split("::")[-1], "hung", f"no result within {limit_s:g} s", time.monotonic() - t)]
    seconds = time.monotonic() - t
    if not xml.exists():
        tail = out.decode(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        return [(node.split("::")[-1], "API absent" if API_ABSENT.search(tail[0]) else "failed", tail[0], seconds)]
    rows = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if case.find("skipped") is not None:
            rows.append((case.get("name", "?"), "skipped", case.find("skipped").get("message", ""), seconds))
        elif bad is None:
            rows.append((case.get("name", "?"), "passed", "", seconds))
        else:
            message = bad.get("message") or bad.text or ""
            lines = [line.strip() for line in message.splitlines() if line.strip()]
            absent = any(API_ABSENT.search(line.lstrip("E ").strip()) for line in lines)
            if message == "collection failure":  # the module did not import: say why, from the traceback
                found = [line.lstrip("E ").strip() for line in (bad.text or "").splitlines()
                         if API_ABSENT.search(line.lstrip("E ").strip())]
                absent = bool(found)
                lines = [f"collection failure: {found[-1]}"] if found else lines
            name = node.split("::")[-1] if message == "collection failure" else case.get("name", "?")
            rows.append((name, "API absent" if absent else "failed", lines[0] if lines else "(no message)", seconds))
    if not rows:  # collection failed before any test: the old package lacks what the tests import
        tail = out.decode(errors="replace").strip()
        found = [line for line in tail.splitlines() if API_ABSENT.search(line.strip("E ").strip())]
        rows = [(node.split("::")[-1], "API absent" if found else "failed",
                 (found or tail.splitlines()[-1:] or ["(no output)"])[0].strip("E ").strip(), seconds)]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run only the fix whose tests commit starts with this")
    parser.add_argument("--issue", help="run only the fixes of this issue (their items start with '<issue>:')")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds per test function before it counts as hung")
    args = parser.parse_args()
    fixes = [f for f in FIXES if (not args.only or f.tests.startswith(args.only))
             and (not args.issue or f.items.startswith(f"{args.issue}:"))]
    table, tally = [], {"failed": 0, "hung": 0, "API absent": 0, "passed": 0, "skipped": 0}
    for fix in fixes:
        before = git("rev-parse", "--short", f"{fix.before}")
        tests = git("rev-parse", "--short", fix.tests)
        tree = Path(tempfile.mkdtemp(prefix=f"ap_gym_ff_{tests}_"))
        shutil.rmtree(tree)
        git("worktree", "add", "--detach", "--force", str(tree), before)
        try:
            subprocess.run(["git", "-C", str(tree), "checkout", tests, "--", "tests"], check=True, capture_output=True)
            (tree / ".ff_site").mkdir()
            (tree / ".ff_site" / "sitecustomize.py").write_text(_NO_EDITABLE)
            for node in fix.nodes:
                for case, outcome, detail, seconds in run_test(tree, node, args.limit):
                    tally[outcome] += 1
                    detail = detail.replace("|", "\\|")[:160]
                    table.append(f"| {fix.items} | {before} | {tests} | `{case}` | {outcome} | {seconds:.1f} | {detail} |")
                    print(f"{fix.items:>24}  {before} <- {tests}  {case}: {outcome} {detail}", flush=True)
        finally:
            git("worktree", "remove", "--force", str(tree))
    shown = tally["failed"] + tally["hung"]
    total = sum(tally.values())
    body = (
        f"{total} test cases of {'the fixes of issue ' + ', '.join(sorted({f.items for f in fixes})) if args.only else 'the listed fixes'}, "
        "each run against the package before its fix "
        f"(tests from the fix commit): **{shown} fail there** (failed {tally['failed']}, hung {tally['hung']}), "
        f"{tally['API absent']} cannot run there (the old package lacks a name they use), "
        f"{tally['passed']} pass there, {tally['skipped']} skipped. A test that passes before its fix "
        "does not prove that fix; one whose API is absent proves nothing either way.\n\n"
        "| items | package at | tests from | test case | before the fix | seconds (its pytest run) | first line of the failure |\n"
        "|---|---|---|---|---|---|---|\n" + "\n".join(table))
    # --only writes a section of its own, so a partial run never replaces the whole table
    name = "failing_first" + (f"_{args.only}" if args.only else "") + (f"_issue{args.issue}" if args.issue else "")
    emit(name, "`failing_first.py`: each fix's tests against the code before it"
         + (f" (the fix tested by {args.only})" if args.only else "")
         + (f" (the fixes of issue {args.issue})" if args.issue else ""), body)


if __name__ == "__main__":
    main()
