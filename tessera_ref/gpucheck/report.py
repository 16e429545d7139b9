"""The GPU check's report (CUDA-CHECK-7): a JSON document of schema :data:`SCHEMA` and its
Markdown summary, small files meant to be committed under ``benchmarks/results/``."""
from __future__ import annotations

from ..errors import UsageError

__all__ = ["SCHEMA", "STATUSES", "validate", "summary_markdown"]

SCHEMA = "tessera_ref.gpu-check/1"
#: what an item can end as
STATUSES = ("pass", "differ", "error", "fault", "timeout", "skipped")
_STAGE_STATUSES = ("pass", "fail", "skipped")


def validate(report: dict) -> dict:
    """``report`` if it is a report of :data:`SCHEMA`, else a UsageError naming what is wrong."""
    def need(cond, what):
        if not cond:
            raise UsageError(f"not a {SCHEMA} report: {what}", fix="run `tessera-ref gpu-check` to write one")
    need(isinstance(report, dict) and report.get("schema") == SCHEMA, f"schema is {report.get('schema')!r}"
         if isinstance(report, dict) else "not a JSON object")
    for key, kind in (("mode", str), ("dry_run", bool), ("complete", bool), ("started", str), ("seconds", (int, float)),
                      ("environment", dict), ("stages", list), ("status", str), ("files", list)):
        need(isinstance(report.get(key), kind), f"{key!r} missing or not {getattr(kind, '__name__', kind)}")
    need(report["mode"] in ("full", "quick"), f"mode {report['mode']!r}")
    need(report["status"] in ("pass", "fail"), f"status {report['status']!r}")
    for st in report["stages"]:
        need(isinstance(st, dict) and isinstance(st.get("name"), str), "a stage without a name")
        need(st.get("status") in _STAGE_STATUSES, f"stage {st.get('name')}: status {st.get('status')!r}")
        need(isinstance(st.get("seconds"), (int, float)) and isinstance(st.get("items"), list),
             f"stage {st['name']}: seconds or items missing")
        for item in st["items"]:
            need(isinstance(item, dict) and isinstance(item.get("name"), str) and item.get("status") in STATUSES,
                 f"stage {st['name']}: an item without a name or with status {item.get('status')!r}")
    return report


def _fmt(v, spec=".1f"):
    if not isinstance(v, (int, float)):
        return "—"
    return format(v, spec) if abs(v) >= 0.1 or v == 0 else format(v, ".3g")


def _speed_table(items, copy_gb_s) -> list:
    lines = ["| case | tessera_ref | baseline | ratio | of copy bandwidth | baseline used |", "|---|---|---|---|---|---|"]
    for it in items:
        if "ours_rate" not in it:
            lines.append(f"| {it['name']} | {it['status']}: {it.get('detail', '')} | | | | |")
            continue
        unit = it["unit"]
        share = f"{it['ours_rate'] / copy_gb_s:.0%}" if unit == "GB/s" and copy_gb_s else ""
        lines.append(f"| {it['name']} | {_fmt(it['ours_rate'])} {unit} | {_fmt(it.get('baseline_rate'))} {unit} | "
                     f"{_fmt(it.get('ratio'), '.2f')} | {share} | {it.get('baseline', '')} |")
        if "torch_ratio" in it:
            lines.append(f"| {it['name']} vs PyTorch | | {_fmt(it['ours_ms'] / it['torch_ratio'], '.3f')} ms | "
                         f"{_fmt(it['torch_ratio'], '.2f')} | | {it['torch_label']} |")
    return lines


def summary_markdown(report: dict) -> str:
    """The report as Markdown: the environment, one row per stage, then each stage's items."""
    env = report["environment"]
    title = "GPU check (dry run: the CUDA-on-CPU harness stands in for the GPU)" if report["dry_run"] else "GPU check"
    lines = [f"# {title}: {env.get('device', '?')}, {report['started'][:10]}", "",
             f"`tessera-ref gpu-check{' --quick' if report['mode'] == 'quick' else ''}"
             f"{' --dry-run' if report['dry_run'] else ''}`: **{report['status']}** in {report['seconds']:.0f} s"
             f"{'' if report['complete'] else ' (cut short: the stages below are those that ended)'}.", ""]
    if env:
        lines += [f"- {env.get('detail', '')}", f"- Python {env.get('python')}, NumPy {env.get('numpy')}, "
                  f"NCCL {env.get('nccl')}, PyTorch {env.get('torch') or 'not installed'}, compute-sanitizer "
                  f"{'at ' + env['compute_sanitizer'] if env.get('compute_sanitizer') else 'not found'}", ""]
    lines += ["| stage | what | status | seconds | items |", "|---|---|---|---|---|"]
    for st in report["stages"]:
        counts = {}
        for it in st["items"]:
            counts[it["status"]] = counts.get(it["status"], 0) + 1
        lines.append(f"| {st['name']} | {st.get('what', '')} | {st['status']} | {st['seconds']:.0f} | "
                     f"{', '.join(f'{n} {s}' for s, n in counts.items()) or '—'} |")
    copy = next((it.get("gb_s") for st in report["stages"] for it in st["items"] if it["name"] == "copy_bandwidth"),
                None)
    for st in report["stages"]:
        if st["name"] == "environment" or not st["items"]:
            continue
        lines += ["", f"## {st['name']}", ""]
        if st["name"] == "speed":
            lines += _speed_table([it for it in st["items"] if it["name"] not in ("copy_bandwidth", "graph_replay")],
                                  copy)
            lines += [""] + [f"- {it['name']}: {it.get('detail', '')}" for it in st["items"]
                             if it["name"] in ("copy_bandwidth", "graph_replay")]
            continue
        lines += [f"- {it['name']}: **{it['status']}** — {it.get('detail', '')}" for it in st["items"]]
    return "\n".join(lines) + "\n"
