"""``veil peel``, ``veil policy``, ``veil leakage`` and ``veil reencrypt``: adjustable encryption."""

from __future__ import annotations

import argparse
import importlib.util
import sys

# the policy layers, least revealing first (veil.design.policy.LAYERS; not imported:
# `veil --help` starts without pyarrow)
_LAYERS = ("RND", "DET", "OPE", "PLAIN")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    peel = subparsers.add_parser(
        "peel",
        help="take an onion layer off a column ahead of time (what a query would do)",
        description="Peel TABLE.COLUMN's onion down to LAYER (DET: equality, OPE: order) on "
        "the server, as the first query needing it would; refused beyond the column's policy.",
    )
    peel.add_argument("client_dir")
    peel.add_argument("column", metavar="TABLE.COLUMN")
    peel.add_argument("layer", choices=("DET", "OPE", "det", "ope"))
    peel.set_defaults(handler=run_peel)

    policy = subparsers.add_parser(
        "policy",
        help="show or set what each column may ever reveal (RND < DET < OPE < PLAIN)",
        description="A column's policy is the most the server may learn of it: RND (nothing), "
        "DET (equality), OPE (order), PLAIN (anything; needs --allow-plaintext). Default OPE.",
    )
    actions = policy.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser("show", help="every column's policy")
    show.add_argument("client_dir")
    show.set_defaults(handler=run_policy_show)
    set_ = actions.add_parser("set", help="set one column's highest layer")
    set_.add_argument("client_dir")
    set_.add_argument("column", metavar="TABLE.COLUMN")
    set_.add_argument("layer", type=str.upper, choices=_LAYERS)
    set_.add_argument("--allow-plaintext", action="store_true", help="needed for PLAIN")
    set_.add_argument(
        "--reencrypt",
        action="store_true",
        help="when the column already reveals more, re-encrypt its table under fresh keys",
    )
    set_.set_defaults(handler=run_policy_set)
    template = actions.add_parser("template", help="set the columns a template's patterns match")
    template.add_argument("client_dir")
    template.add_argument("name", help="a template: finance, no-order-on-values")
    template.set_defaults(handler=run_policy_template)

    leakage = subparsers.add_parser(
        "leakage",
        help="what the server can learn now, column by column, and which queries caused it",
    )
    leakage.add_argument("client_dir")
    leakage.add_argument("--json", action="store_true", help="the report as JSON")
    leakage.add_argument(
        "--png",
        metavar="FILE",
        help="also draw the totals (SEEED Figure 7; needs matplotlib: veil[plot])",
    )
    leakage.add_argument(
        "--what-if", metavar="SQL", help="what running this query would reveal (runs nothing)"
    )
    leakage.set_defaults(handler=run_leakage)

    reencrypt = subparsers.add_parser(
        "reencrypt",
        help="re-encrypt a table under fresh keys within the current policy (onion layers back on)",
    )
    reencrypt.add_argument("client_dir")
    reencrypt.add_argument("table")
    reencrypt.set_defaults(handler=run_reencrypt)


def run_peel(args: argparse.Namespace) -> int:
    from veil.session.layer_commands import manual_peel
    from veil.session.session import Session

    session = Session(args.client_dir)
    try:
        table, column = _column(args.column)
        event = manual_peel(session, table, column, args.layer.upper())
    finally:
        session.close()
    if event is None:
        print(f"{args.column}: its {args.layer.upper()} layer is already off; nothing to do")
    else:
        print(
            f"peeled {args.column} to {args.layer.upper()}: {event['rows']:,} rows in {event['seconds']} s"
        )
    return 0


def run_policy_show(args: argparse.Namespace) -> int:
    from veil.session.clientdir import open_client_dir

    client = open_client_dir(args.client_dir)
    policy = client.policy()
    design = client.design(client.master_key())
    for table in design.tables.values():
        for column in table.columns:
            print(f"{table.name}.{column.name}: {policy.layer(table.name, column.name)}")
    return 0


def run_policy_set(args: argparse.Namespace) -> int:
    from veil.session.layer_commands import set_policy

    table, column = _column(args.column)
    stale = set_policy(
        args.client_dir,
        {(table, column): args.layer},
        allow_plaintext=args.allow_plaintext,
        reencrypt=args.reencrypt,
    )
    print(f"{args.column}: at most {args.layer}")
    _reencrypt(args.client_dir, stale)
    return 0


def _reencrypt(client_dir: str, tables: list[str]) -> None:
    from veil.load.ddl import reencrypt
    from veil.session.session import Session

    if not tables:
        return
    session = Session(client_dir)
    try:
        for name in tables:
            reencrypt(session, name)
            print(f"{name}: re-encrypted under fresh keys within the policy")
    finally:
        session.close()


def run_policy_template(args: argparse.Namespace) -> int:
    from veil.design.policy import template_layers
    from veil.session.clientdir import open_client_dir
    from veil.session.layer_commands import set_policy

    client = open_client_dir(args.client_dir)
    design = client.design(client.master_key())
    pairs = [(t.name, c.name) for t in design.tables.values() for c in t.columns]
    chosen = template_layers(args.name, pairs)
    wanted = {tuple(name.split(".", 1)): layer for name, layer in chosen.items()}
    set_policy(args.client_dir, wanted)  # type: ignore[arg-type]
    for name, layer in sorted(chosen.items()):
        print(f"{name}: at most {layer}")
    print(f"template {args.name}: {len(chosen)} column(s) set", file=sys.stderr)
    return 0


def run_leakage(args: argparse.Namespace) -> int:
    from veil.frontend.leakage import render_text, write_png
    from veil.session.leakage import leakage, what_if
    from veil.session.session import Session

    if args.png and importlib.util.find_spec("matplotlib") is None:
        # an optional dependency: `pip install veil` leaves plotting out
        print(
            "veil: error: --png draws with matplotlib, which is not installed: "
            "pip install 'veil[plot]' (or matplotlib)",
            file=sys.stderr,
        )
        return 2
    session = Session(args.client_dir)
    try:
        if args.what_if:
            for line in what_if(session, args.what_if):
                print(line)
            return 0
        report = leakage(session)
    finally:
        session.close()
    print(report.to_json() if args.json else render_text(report))
    if args.png:
        write_png(report, args.png)
        print(f"wrote {args.png}", file=sys.stderr)
    return 0


def run_reencrypt(args: argparse.Namespace) -> int:
    _reencrypt(args.client_dir, [args.table.lower()])
    return 0


def _column(name: str) -> tuple[str, str]:
    from veil.design.policy import PolicyError

    table, dot, column = name.partition(".")
    if not dot or not table or not column:
        raise PolicyError(f"{name!r}: name a column as TABLE.COLUMN")
    return table.lower(), column.lower()
