import os

import pytest
import torch

os.environ.setdefault("TQDM_DISABLE", "1")
# as fedlib.flower sets it, but before any test imports Ray (read when Ray is imported): no C++ stack dump on SIGTERM
os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")


@pytest.fixture
def one_thread():
    """Worker processes train with one thread; the in-process reference does too for bitwise checks."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# the tables of bad inputs and faults (tests/test_robustness.py): their counts are printed after every run
BAD_INPUT_TESTS = ("test_bad_input_is_one_line_before_training", "test_records_refuses_bad_arguments_in_one_line",
                   "test_book_refuses_a_bad_manifest_in_one_line")
FAULT_TESTS = ("test_a_write_failing_mid_run_ends_in_one_line_and_the_run_resumes",
               "test_a_damaged_result_record_is_named_and_counted_as_missing",
               "test_a_damaged_cached_record_is_moved_aside_and_recomputed",
               "test_a_damaged_checkpoint_is_moved_aside_and_the_run_starts_again",
               "test_server_side_divergence_stops_the_run_with_one_line",
               "test_folder_variables_are_checked_like_config_fields",
               "test_a_killed_worker_process_is_one_line_and_the_next_run_starts_afresh")
HOSTILE_FILE_TESTS = ("test_a_hostile_data_file_is_named_in_one_line_before_training",
                      "test_a_crafted_pickle_is_not_a_tree_file_and_runs_nothing",
                      "test_a_crafted_checkpoint_runs_nothing_and_the_run_starts_again",
                      "test_a_crafted_client_shard_runs_nothing_and_the_run_starts_again",
                      "test_a_crafted_trained_model_runs_nothing_and_is_retrained",
                      "test_crafted_cached_features_run_nothing_and_are_recomputed",
                      "test_a_crafted_cifar_batch_runs_nothing_and_names_the_file")


def pytest_terminal_summary(terminalreporter):
    def count(names):
        reports = [r for kind in ("passed", "failed") for r in terminalreporter.stats.get(kind, [])
                   if getattr(r, "when", "") == "call" and r.nodeid.split("::")[-1].split("[")[0] in names]
        return len(reports), sum(r.passed for r in reports)

    (bad, clean), (faults, survived) = count(BAD_INPUT_TESTS), count(FAULT_TESTS)
    hostile, harmless = count(HOSTILE_FILE_TESTS)
    if bad or faults or hostile:
        terminalreporter.write_line(f"robustness tables: {bad} bad inputs tried, {clean} refused in one line; "
                                    f"{faults} faults tried, {survived} survived with a clean message or recovery; "
                                    f"{hostile} hostile files tried, {harmless} named or recovered, no code run")
