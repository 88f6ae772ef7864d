"""``aidcnet ctl show bgp`` and ``show bift`` as tables an engineer reads at a glance (``show bgp
summary``-style); ``--json`` keeps the agent's reply as it is. Pure: a reply in, text out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aidcnet.bgp.rib import prefix_key


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns two spaces apart; ``-`` for a missing value."""
    cells = [[str(h) for h in header], *[["-" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def format_bgp(reply: dict[str, Any]) -> str:
    neighbors = reply.get("neighbors") or []
    routes = reply.get("routes") or {}
    # The agent says "up" (ExaBGP's word); "established" is BGP's.
    up = sum(1 for n in neighbors if n.get("session") in ("up", "established"))
    out = [
        f"BGP AS {reply.get('asn', '-')}, FARE mode {reply.get('mode', '-')}: "
        f"{up}/{len(neighbors)} sessions established, {len(routes)} routes selected",
        "",
        table(
            [
                "Neighbor",
                "Name",
                "Interface",
                "AS",
                "Link",
                "Bandwidth",
                "Session",
                "Security",
                "Rcvd",
                "Sent",
            ],
            [
                [
                    n.get("peer"),
                    n.get("name"),
                    n.get("interface"),
                    n.get("asn"),
                    n.get("link"),
                    n.get("bandwidth"),
                    n.get("session"),
                    security(n),
                    n.get("received"),
                    n.get("advertised"),
                ]
                for n in neighbors
            ],
        ),
    ]
    # Named, so an operator (and the fare_bgp role's failure message) sees which session to fix.
    problems = [
        f"  {n.get('peer')} ({n.get('name')} via {n.get('interface')}): {n['problem']}"
        for n in neighbors
        if n.get("problem")
    ]
    if problems:
        out += ["", "Session problems:", *problems]
    md5 = {k: v for k, v in (reply.get("tcp_md5_counters") or {}).items() if v}
    if md5:
        out += ["TCP-MD5 drops since the agent started: " + ", ".join(f"{k} {v}" for k, v in md5.items())]
    if routes:
        rows = []
        for prefix, route in sorted(routes.items(), key=lambda kv: prefix_key(kv[0])):
            hops = ", ".join(f"{h['via']} {h['dev']} w{h['weight']}" for h in route.get("nexthops") or [])
            path = " ".join(str(a) for a in route.get("as_path") or []) or "(local)"
            rows.append([prefix, path, hops or "-", route.get("advertised_bw")])
        out += ["", table(["Prefix", "AS path", "Next hops (via dev weight)", "Advertised bw"], rows)]
    counters = {k: v for k, v in (reply.get("counters") or {}).items() if v}
    if counters:
        out += ["", "counters: " + ", ".join(f"{k}={v}" for k, v in sorted(counters.items()))]
    events = reply.get("events") or []
    if events:
        out += ["", f"{len(events)} recent link event(s); --json shows them with their convergence timing"]
    return "\n".join(out)


def security(neighbor: dict[str, Any]) -> str:
    """``md5`` (RFC 2385) and ``gtsmH`` (RFC 5082, H hops) as the session has them; ``-``: neither."""
    parts = (["md5"] if neighbor.get("md5") else []) + (
        [f"gtsm{neighbor['gtsm_hops']}"] if neighbor.get("gtsm_hops") else []
    )
    return "+".join(parts) or "-"


def format_bift(reply: dict[str, Any]) -> str:
    dataplane = reply.get("dataplane", "-")
    configured = reply.get("dataplane_configured")
    head = (
        f"BFR-id {reply.get('bfr_id', '-')}, sub-domain {reply.get('sub_domain', '-')}, "
        f"BSL {reply.get('bsl', '-')}, label base {reply.get('label_base', '-')}, "
        f"BIFT {reply.get('bift_mode', '-')}, dataplane {dataplane}"
        + (f" (configured {configured})" if configured and configured != dataplane else "")
    )
    out = [head]
    for key in ("dataplane_error", "imposition_error"):
        if reply.get(key):
            out.append(f"{key.replace('_', ' ')}: {reply[key]}")
    bift = reply.get("bift") or {}
    if not bift:
        out.append("BIFT empty")
    for si, rows in sorted(bift.items(), key=lambda kv: int(kv[0])):
        table_rows = [
            [row["bfr_id"], e["f_bm"], e["bfr_nbr"]]
            for row in rows
            for e in row.get("entries") or [{"f_bm": None, "bfr_nbr": None}]
        ]
        out += ["", f"SI {si}", table(["BFR-id", "F-BM", "BFR-NBR"], table_rows)]
    prefixes = reply.get("bgp_prefixes")
    if prefixes:
        out += [
            "",
            table(["BFR-id", "BFR-prefix (from BGP)"], sorted(prefixes.items(), key=lambda kv: int(kv[0]))),
        ]
    if reply.get("bgp_problems"):
        out += ["", "BGP problems: " + "; ".join(map(str, reply["bgp_problems"]))]
    bypasses = (reply.get("fast_reroute") or {}).get("bypass") or {}
    if bypasses:
        on = set(reply["fast_reroute"].get("on") or ())
        rows = [
            [nbr, b["via"], " ".join(map(str, b["labels"])), "on" if nbr in on else "-"]
            for nbr, b in sorted(bypasses.items())
        ]
        out += ["", "fast reroute", table(["to BFR-NBR", "via", "labels pushed", "in use"], rows)]
    nnh = (reply.get("fast_reroute") or {}).get("nnh_bypass") or {}
    if nnh:
        on = set(reply["fast_reroute"].get("on") or ())
        rows = [
            [
                nbr,
                t["nnh"],
                t["via"],
                " ".join(map(str, t["labels"])) or "-",
                " ".join(map(str, t["bfr_ids"])),
                "on" if nbr in on else "-",
            ]
            for nbr, tunnels in sorted(nnh.items())
            for t in tunnels
        ]
        headers = ["around BFR-NBR", "to next-next hop", "via", "labels pushed", "BFR-ids", "in use"]
        out += ["", "fast reroute, node protection", table(headers, rows)]
    return "\n".join(out)


def format_bfd(reply: dict[str, Any]) -> str:
    """``aidcnet ctl show bfd``: the sessions, then the changes the agent kept, oldest first."""
    wall_ms = reply.get("wall_interval_s", 0) * 1e3
    head = (
        f"interval {reply.get('interval_us')} us of fabric time ({wall_ms:.1f} ms wall), "
        f"multiplier {reply.get('multiplier')}, loss threshold {reply.get('loss_threshold')}"
    )
    sessions = [
        [
            s["interface"],
            s["peer"],
            s["state"],
            s["remote_state"],
            "-" if s["loss"] is None else f"{s['loss']:.0%}",
        ]
        for s in reply.get("sessions", [])
    ]
    events = [
        [e["interface"], e["state"], e["reason"], e["at_ns"], f"{e['late_s'] * 1e3:.1f}"]
        for e in reply.get("events", [])
    ]
    changes = table(["interface", "state", "reason", "at (wall ns)", "late (ms)"], events)
    sessions_table = table(["interface", "peer", "state", "remote", "loss"], sessions)
    return "\n".join([head, "", sessions_table, "", changes if events else "no changes yet"])
