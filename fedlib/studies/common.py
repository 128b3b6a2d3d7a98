"""The chapters' shared helpers: ``grid`` (running grids, committed records), ``report`` (labels, mean ± std,
provenance, tables, summaries) and ``verdicts`` (the verdict rule and its boxes). This module hands their names on,
so chapters and notebooks import the common ones from one place."""
from fedlib.studies.grid import (
                                 ON_CPU,
                                 Runtime,
                                 complete_runs,
                                 convergence_grid,
                                 flat,
                                 nested,
                                 partial_seeds,
                                 run_all,
                                 run_grid,
                                 seeds_of,
                                 stored_grid,
                                 with_diverged,
                                 with_seeds,
)
from fedlib.studies.report import (
                                 ResultsTable,
                                 convergence_gap,
                                 entropy_rows,
                                 fmt,
                                 load_summaries,
                                 mean_std,
                                 method_labels,
                                 ordered,
                                 provenance,
                                 provenance_line,
                                 read_cached_record_like,
                                 records_in,
                                 report_stored,
                                 save_summary,
                                 show_table,
                                 summary_path,
)
from fedlib.studies.verdicts import box_html, smoke_html

__all__ = [
    "Runtime", "ON_CPU", "complete_runs", "flat", "run_all", "run_grid", "nested", "with_seeds",
    "stored_grid", "with_diverged", "seeds_of", "partial_seeds",
    "convergence_grid", "convergence_gap", "method_labels",
    "mean_std", "fmt", "provenance", "records_in",
    "provenance_line", "ResultsTable", "show_table", "report_stored", "box_html", "smoke_html",
    "ordered",
    "entropy_rows", "summary_path", "save_summary", "read_cached_record_like", "load_summaries",
]
