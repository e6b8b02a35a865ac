"""How adequate the grader's cases are: the kill rate of the mutants of
every exercise's reference answer (``course_tools/mutation.py``).

A mutant is killed when a visible or a hidden case fails it; an
equivalent one (listed with its reason in
``course_tools/equivalent_mutants.toml`` as "equivalent:") does not
count; a survivor listed as "accepted:" counts as a survivor. Each
mutant meets the hidden cases of every salt given (a fresh draw per
salt); a mutant that only some salts kill is named. Prints one line per
exercise and the total, and the CPU seconds; writes
``mutation.latest.json``.

    .venv/bin/python benchmarks/mutation.py [--salts 1 2 3]
"""

import argparse
import platform
import resource
import time
from datetime import date
from pathlib import Path

from course_tools import mutation, records

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--salts", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--only", nargs="*", help="exercises to run")
    args = parser.parse_args(argv)
    listed = mutation.equivalents()
    exercises = mutation.all_exercises()
    rows, total = {}, {"mutants": 0, "equivalent": 0, "killed": 0,
                       "survivors": 0}
    start, clock = cpu(), time.perf_counter()
    for name, spec in exercises.items():
        if args.only and name not in args.only:
            continue
        before = cpu()
        by_salt = [mutation.run_mutants(spec, salts=(salt,))
                   for salt in args.salts]
        reasons = listed.get(name, {})
        keys = list(by_salt[0])
        equivalent = [k for k in keys
                      if reasons.get(k, "").startswith("equivalent:")]
        killed = [k for k in keys if k not in equivalent
                  and all(r[k] is not None for r in by_salt)]
        survivors = [k for k in keys if k not in equivalent
                     and k not in killed]
        unlisted = [k for k in survivors if k not in reasons]
        by_some = [k for k in keys if k not in equivalent and any(
            r[k] is None for r in by_salt) and any(
            r[k] is not None for r in by_salt)]
        stale = sorted(k for k in reasons if k not in keys or all(
            r[k] is not None for r in by_salt))
        judged = len(keys) - len(equivalent)
        rate = len(killed) / judged if judged else 1.0
        rows[name] = {
            "mutants": len(keys), "equivalent": len(equivalent),
            "killed": len(killed), "survivors": survivors,
            "unlisted_survivors": unlisted, "killed_by_some_salts": by_some,
            "listed_but_killed_or_gone": stale,
            "kill_rate": round(rate, 4),
            "cpu_s": round(cpu() - before, 2),
        }
        total["mutants"] += len(keys)
        total["equivalent"] += len(equivalent)
        total["killed"] += len(killed)
        total["survivors"] += len(survivors)
        flag = "" if not unlisted else f"  {len(unlisted)} NOT REVIEWED"
        print(f"{name:33s} {len(keys):4d} mutants, {len(equivalent):3d} "
              f"equivalent, kill rate {100 * rate:6.2f}%"
              f"{flag}", flush=True)
        for key in survivors:
            print(f"    survives: {key}")
        for key in by_some:
            print(f"    killed by some salts only: {key}")
    judged = total["mutants"] - total["equivalent"]
    total["kill_rate"] = round(total["killed"] / judged, 4) if judged \
        else 1.0
    spent = cpu() - start
    print(f"total: {total['mutants']} mutants, {total['equivalent']} "
          f"equivalent, {total['killed']} of {judged} killed "
          f"({100 * total['kill_rate']:.2f}%), {total['survivors']} "
          f"survivors; {spent:.1f} s CPU for {len(args.salts)} salts")
    figures = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "salts": args.salts,
        "cpu_s": round(spent, 1),
        "wall_s": round(time.perf_counter() - clock, 1),
        "total": total,
        "exercises": rows,
    }
    if not args.only:
        # the references, the cases and the mutator: every course_lib and
        # course_tools module this run imported, and the reviewed list
        sources = {*records.loaded_sources(__file__),
                   *records.loaded_sources(package="course_tools"),
                   ROOT / "course_tools" / "equivalent_mutants.toml"}
        out = HERE / "mutation.latest.json"
        records.write(records.stamp(figures, sorted(sources)), out)
        print(f"wrote {out.name}")


if __name__ == "__main__":
    main()
