"""Record a chapter on a lent GPU machine that receives a copy of the working tree and nothing else: no .git, no
installed fedlib, no datasets, no network, a few minutes a call, files back through a folder ($OUT).

    python deploy/device.py pack [--datasets fmnist mnist]   # here: .device-bundle/ (git-ignored; carry it)
    bash deploy/device.sh SECONDS CHAPTER [records options]   # there, in the copy's root: records into $OUT
    python deploy/device.py unpack FOLDER                     # here: the records it brought back, into results/

``pack`` writes the datasets' IDX files xz-compressed (Fashion-MNIST: 26 MB against 30 MB gzipped, so the bundle
and the working tree fit a 64 MiB transfer) and the commit the records will name (the copy has no .git, so
``FEDLIB_CODE_VERSION`` carries it; fedlib's files must be committed). ``unpack`` extracts only result records,
never overwrites a committed one, and replays the first new record's first two rounds on this CPU
(``results.replay``, the check ``tests/test_results.py`` makes of every committed record)."""
import argparse
import json
import lzma
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / ".device-bundle"
# the folder under $FEDLIB_DATA where each offline source's loader looks first (fedlib.data.sources)
DATA_FOLDERS = {"fmnist": "fashion-mnist", "mnist": "mnist"}


def code_version() -> str:
    """The commit fedlib's files are at (what every record names, ``experiment.records.code_version``); refused
    while they differ from it or no commit is known (a record must name its code)."""
    from fedlib.experiment.records import code_version as named

    version = named()
    commit = version[version.index("(") + 1:-1] if "(" in version else ""
    if not commit or commit.endswith("+changes"):
        raise SystemExit(f"error: the records would name '{version}': commit fedlib/ first, so they name their code")
    return commit


def pack(datasets: list[str], bundle: Path = BUNDLE, version: str | None = None) -> int:
    """Write ``bundle``: data/<folder>/<IDX file>.xz for each dataset and code_version. Returns its size in bytes."""
    import gzip

    from fedlib.data.sources import read_arrays

    for name in datasets:
        if name not in DATA_FOLDERS:
            raise SystemExit(f"error: --datasets {name}: one of {', '.join(DATA_FOLDERS)} (IDX files on disk)")
        folder = bundle / "data" / DATA_FOLDERS[name]
        folder.mkdir(parents=True, exist_ok=True)
        for path in read_arrays(name).files:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            target = folder / f"{path.name.removesuffix('.gz')}.xz"
            if not target.exists() or lzma.decompress(target.read_bytes()) != raw:
                target.write_bytes(lzma.compress(raw, preset=9))
    (bundle / "code_version").write_text((version or code_version()) + "\n")
    return sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file())


def unpack(folder: Path, root: Path = ROOT, replay: bool = True) -> list[Path]:
    """Extract the result records of ``folder``/records.tgz into ``root``/results (new files only); returns them."""
    new = []
    with tarfile.open(folder / "records.tgz") as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            record_path = len(parts) == 3 or (len(parts) == 4 and parts[2] == "diverged")   # results/<ch>/[diverged/]
            if not (member.isfile() and record_path and parts[0] == "results" and parts[-1].endswith(".json")
                    and ".." not in parts):
                print(f"skipped {member.name}: not a result record")
                continue
            target = root / member.name
            if target.exists():
                print(f"kept {member.name}: already there")
                continue
            data = tar.extractfile(member)
            assert data is not None
            raw = data.read()
            json.loads(raw)   # a record is JSON; anything else stops here
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(raw)
            new.append(target)
    print(f"{len(new)} new record(s) under results/")
    runs = [p for p in new if p.parent.name != "diverged"]
    if replay and runs:
        from fedlib import results

        checks = results.replay(json.loads(runs[0].read_text()), rounds=2)
        ok = all(c["ok"] for c in checks)
        print(f"replay of {runs[0].relative_to(root)} on this CPU: {'ok' if ok else 'DIFFERS'} "
              f"(largest difference {max(c['difference'] for c in checks):.2g})")
    return new


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--datasets", nargs="+", default=["fmnist"], help=f"of {', '.join(DATA_FOLDERS)}")
    u = sub.add_parser("unpack")
    u.add_argument("folder", type=Path, help="where the device call's files landed (records.tgz)")
    u.add_argument("--no-replay", action="store_true")
    args = ap.parse_args(argv)
    if args.command == "pack":
        size = pack(args.datasets)
        print(f"{BUNDLE.relative_to(ROOT)}: {size / 2**20:.1f} MiB (carry it: the working tree and it travel together, "
              "64 MiB at most)")
    else:
        unpack(args.folder, replay=not args.no_replay)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
