#!/usr/bin/env python3
"""Which ONNX attributes the converter's importer ignores: writes converters/onnx/src/attrs_table.rs.

    python3 converters/conformance/attr_audit.py            # rewrites the table
    python3 converters/conformance/attr_audit.py --stdout   # prints it (the test compares)
    python3 converters/conformance/attr_audit.py --report   # what each parser reads, per op

For every op of ONNX's default domain (every version of its schema: exporters write opsets
11 to 28, and an attribute an older version defines can still be in a file), the attributes
and their defaults come from `onnx.defs`. Which of them the importer READS comes from the
source of the parser registered for the op: tract-onnx's (`reg.insert("Op", f)` under
`src/ops/`, the version in Cargo.lock, read from cargo's registry) unless Kestrel registers
its own (`reg.insert` / `op_register.insert` under converters/onnx/src). A parser reads an
attribute when its body — or a function it calls with the node — calls
`get_attr*("name")` / `get_attr_opt*("name")` or compares an attribute's `name` with a
literal. Functions are followed by name (same file first, then the module named in the
call's path, then the one function of that name in the crate).

What the scan cannot follow is decided by hand in `HAND_READS` (names read through a
variable, a loop, a constant) and `HAND_PARSERS` (parsers registered in a loop or only in
some modes); each entry says why. Where unsure, the attribute stays listed as ignored: a
refusal is better than a wrong number.

The table lists every (op, attribute) that ONNX defines and the parser does not read, with
its default; `converters/onnx/src/attrs.rs` refuses a node that sets one to anything else.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import struct
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import onnx
import onnx.defs
import onnx.helper

ROOT = Path(__file__).resolve().parents[2]
KESTREL_SRC = ROOT / "converters/onnx/src"
TABLE = KESTREL_SRC / "attrs_table.rs"

# ---------------------------------------------------------------------------------------------
# Hand decisions.

# Attributes the parser honours without reading them by name, verified by reading the code,
# with the reason. Key: op type. Only attributes whose every valid value gives the numbers ONNX
# defines go here; everything else stays listed (refused when not at its default).
HONOURED: dict[str, dict[str, str]] = {
    "Split": {
        "num_outputs": "ONNX requires as many outputs as num_outputs; tract splits into the node's "
        "output count, chunks of ceil(dim / n) and a smaller last one, ONNX's rule "
        "(tract-hir array/split.rs split_dims)",
    },
    "LSTM": {"hidden_size": "implied by R's shape [dirs, 4·hidden, hidden], which tract's CommonRec reads "
             "(a different value is an invalid model)"},
    "GRU": {"hidden_size": "implied by R's shape [dirs, 3·hidden, hidden], which tract's CommonRec reads "
            "(a different value is an invalid model)"},
    "RNN": {"hidden_size": "implied by R's shape [dirs, hidden, hidden], which tract's CommonRec reads "
            "(a different value is an invalid model)"},
    "TopK": {"sorted": "sorted = 0 leaves the order of the k values to the implementation: tract's "
             "sorted order is one of the allowed results"},
    "BatchNormalization": {
        "momentum": "feeds only the running mean/variance outputs of training mode: a node with "
        "training_mode = 1 is Kestrel's (batch_norm.rs, which reads momentum), and tract's "
        "parser refuses the extra outputs (ops/nn/batch_norm.rs: one output)",
        # batch_norm::mark renames every node with training_mode = 1 to Kestrel's own op before
        # any parser runs (the check runs after it), so the nodes tract's parser sees have 0.
        "training_mode": "a node with training_mode = 1 is renamed to Kestrel's training-mode op "
        "(batch_norm::mark) before the parsers and this check run",
    },
    "Dropout": {
        "ratio": "tract's Dropout is the identity (mask all true) and refuses training mode, the "
        "only mode where the ratio changes a value (opset 7-11 Dropout is inference-only)",
        "seed": "draws nothing: tract's Dropout is the identity and refuses training mode "
        "(ops/nn/dropout.rs), so no random number is ever drawn from the seed",
    },
}

# Ignored attributes of which one value is what the importer computes anyway, taken in place
# of ONNX's default (the table's entry holds it; any other value is refused). Reason given.
TAKEN_AS_DEFAULT: dict[tuple[str, str], tuple[tuple[int, object], str]] = {
    ("Attention", "softmax_precision"): (
        (onnx.AttributeProto.INT, 1),
        "not ONNX's default (none: the precision of Q and K): 1 (FLOAT) is the precision Kestrel "
        "computes every Attention softmax in (src/attention, ops_table.rs)",
    ),
}

# Kestrel parsers the scan cannot attribute to an op by itself:
# - random.rs registers `parse` for each name of `OPS` in a loop.
# - run_dims registers NonZero / TopK / NonMaxSuppression only when converting (not when
#   verifying, where tract's parsers run): an attribute counts as read only when BOTH read it.
HAND_PARSERS: dict[str, list[tuple[str, str]]] = {
    "RandomNormal": [("kestrel", "random::parse")],
    "RandomUniform": [("kestrel", "random::parse")],
    "RandomNormalLike": [("kestrel", "random::parse")],
    "RandomUniformLike": [("kestrel", "random::parse")],
    "Bernoulli": [("kestrel", "random::parse")],
}
# Op types registered by Kestrel in one mode only: both parsers apply.
BOTH_MODES = {"NonZero", "TopK", "NonMaxSuppression"}

# `--report` lists the calls it could not follow. Checked by hand (tract-onnx 0.23.9): each
# passes values already read from the node (`node.input.len()`, `node.get_attr_opt(..)?`), not
# the node — `Compress::new`, `QuantizeLinear::new`, `DequantizeLinear::new`, `Dropout::new`,
# `ConvTranspose::new`, `array::Split::new`, `BoxRepr::from_i64`, `CoordTransform::parse`,
# `Interpolator::parse`, `Nearest::parse`, `AspectRatio::parse`,
# `array::ScatterReduction::parse`, `.padding(pad(node, ..))` (pad is followed),
# `InferenceModelPatch::intercept` and `model.node(..)` (Scan's body), and model.rs's
# `optional_inputs`/`optional_outputs` closures (`map`, reading input names only).

# Kestrel's registrations of op types that are not ONNX ops (renamed nodes): not audited.
NOT_ONNX = {"TRAINING", "crate::masked_scatter::OP_TYPE", "op"}

# ---------------------------------------------------------------------------------------------
# Rust source scanning.

ATTR_CALL = re.compile(r"\.(?:get_attr|get_attr_opt|get_attr_slice|get_attr_opt_slice|get_attr_tvec|"
                       r"get_attr_opt_tvec|get_attr_vec|get_attr_opt_vec)\s*(?:::\s*<[^()]*?>)?\s*\(\s*\"(\w+)\"")
ATTR_CALL_VAR = re.compile(r"\.get_attr\w*\s*(?:::\s*<[^()]*?>)?\s*\(\s*[a-z_]\w*\s*\)")
NAME_CMP = re.compile(r"\.name\s*==\s*\"(\w+)\"")
FN_DEF = re.compile(r"\bfn\s+(\w+)\s*(?:<[^>]*>)?\s*\(")
IMPL = re.compile(r"\bimpl\s*(?:<[^{]*?>)?\s*(?:[\w:]+(?:<[^{]*?>)?\s+for\s+)?(\w+)\s*(?:<[^{]*?>)?\s*(?:where[^{]*)?\{")
KEYWORDS = {"match", "if", "while", "for", "return", "Ok", "Some", "Err", "expand", "vec", "tvec", "format",
            "bail", "ensure", "Box", "in", "let"}
CALL = re.compile(r"((?:\w+::)*)(\w+)\s*(?:::<[^()]*?>)?\s*\(")


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def matching(text: str, i: int, open_c: str, close_c: str) -> int:
    """Index just past the bracket closing the one at `i` (string literals skipped)."""
    depth, j, n = 0, i, len(text)
    while j < n:
        c = text[j]
        if c == '"':
            j += 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
        elif c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return n


class Crate:
    def __init__(self, name: str, src: Path):
        self.name = name
        self.src = src
        self.files: dict[str, str] = {}
        for p in sorted(src.rglob("*.rs")):
            rel = p.relative_to(src).as_posix()
            if rel.startswith("prost/"):
                continue
            self.files[rel] = strip_comments(p.read_text())
        # (file, fn name) -> (params, body)
        self.fns: dict[tuple[str, str], tuple[str, str]] = {}
        for rel, text in self.files.items():
            for m in FN_DEF.finditer(text):
                p_end = matching(text, m.end() - 1, "(", ")")
                b = text.find("{", p_end)
                semi = text.find(";", p_end)
                if b < 0 or (0 <= semi < b):
                    continue
                self.fns[(rel, m.group(1))] = (text[m.end() - 1:p_end], text[b:matching(text, b, "{", "}")])
            # Methods, also under `Type::name`.
            for m in IMPL.finditer(text):
                b = m.end() - 1
                block = text[b:matching(text, b, "{", "}")]
                for f in FN_DEF.finditer(block):
                    p_end = matching(block, f.end() - 1, "(", ")")
                    fb = block.find("{", p_end)
                    semi = block.find(";", p_end)
                    if fb < 0 or (0 <= semi < fb):
                        continue
                    self.fns[(rel, f"{m.group(1)}::{f.group(1)}")] = (
                        block[f.end() - 1:p_end], block[fb:matching(block, fb, "{", "}")])

    def module_files(self, module: str) -> list[str]:
        return [f for f in self.files if f.endswith(f"/{module}.rs") or f == f"{module}.rs"
                or f.endswith(f"/{module}/mod.rs") or f == f"{module}/mod.rs"]

    def resolve(self, here: str, path: str, name: str) -> list[str]:
        """Files defining fn `name` called as `path::name` from file `here`."""
        segs = [s for s in path.split("::") if s and s not in ("crate", "self", "super")]
        if segs and segs[-1][:1].isupper():
            # `Type::method`: the method of that name in an impl of the type.
            key = f"{segs[-1]}::{name}"
            files = [f for (f, n) in self.fns if n == key]
            files.sort(key=lambda f: -common(f, here))
            return [(f, key) for f in files[:1]]
        if segs:
            files = [f for f in self.module_files(segs[-1]) if (f, name) in self.fns]
            files.sort(key=lambda f: -common(f, here))
            return [(f, name) for f in files[:1]]
        if (here, name) in self.fns:
            return [(here, name)]
        cands = [f for (f, n) in self.fns if n == name]
        if len(cands) == 1:
            return [(cands[0], name)]
        # Several: the closest one (same directory), or none (reported).
        cands.sort(key=lambda f: -common(f, here))
        return [(cands[0], name)] if cands and common(cands[0], here) > common(cands[1], here) else []


def common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a.split("/")[:-1], b.split("/")[:-1]):
        if x != y:
            break
        n += 1
    return n


def node_var(params: str) -> str | None:
    m = re.search(r"(\w+)\s*:\s*&\s*(?:'\w+\s+)?(?:\w+::)*NodeProto\b", params)
    return m.group(1) if m else None


def reads_of(crate: Crate, here: str, params: str, body: str, seen: set, trace: list) -> set[str]:
    return _reads_of(crate, here, params, body, seen, trace)


# Kestrel's parsers call into tract's importer (`tract_onnx::model::optional_inputs`,
# `CommonRec::from_node_and_options`): a call not found in Kestrel is looked up in tract.
FALLBACK: dict[str, "Crate"] = {}


def _reads_of(crate: Crate, here: str, params: str, body: str, seen: set, trace: list) -> set[str]:
    """Attributes read by a function (its body and the functions it passes the node to)."""
    out = set(ATTR_CALL.findall(body)) | set(NAME_CMP.findall(body))
    if ATTR_CALL_VAR.search(body):
        # A name read through a variable: a local closure `let f = |name: &str| … get_attr(name)`
        # called with literals, or a loop over literals (`for name in ["a", "b"]`).
        for c in re.findall(r"let\s+(\w+)\s*=\s*\|", body):
            out |= set(re.findall(rf"\b{c}\s*\(\s*\"(\w+)\"", body))
        for lst in re.findall(r"\bfor\s+\w+\s+in\s+\[([^\]]*)\]", body):
            out |= set(re.findall(r"\"(\w+)\"", lst))
    var = node_var(params)
    if var is None:
        # A closure `|c, node|`: its second parameter.
        m = re.match(r"\|\s*\w+\s*,\s*(\w+)\s*\|", params)
        var = m.group(1) if m else None
    for m in CALL.finditer(body):
        path, name = m.group(1), m.group(2)
        if name in KEYWORDS or name.startswith("get_attr") or (path and body[m.start() - 1:m.start()] == "."):
            continue
        args_end = matching(body, m.end() - 1, "(", ")")
        args = body[m.end():args_end - 1]
        if var is None or not re.search(rf"\b{var}\b", args):
            continue
        c = crate
        found = c.resolve(here, path, name)
        if not found and crate.name in FALLBACK:
            c = FALLBACK[crate.name]
            found = c.resolve("", path, name)
        if not found:
            trace.append(f"unresolved call {path}{name}(…{var}…) in {here}")
            continue
        for key in found:
            if (c.name, key) in seen:
                continue
            seen.add((c.name, key))
            p, b = c.fns[key]
            trace.append(f"follows {c.name}:{key[0]}:{key[1]}")
            out |= _reads_of(c, key[0], p, b, seen, trace)
    return out


REG = re.compile(r"(?:reg|op_register)\s*\.\s*insert\s*\(")


def registrations(crate: Crate) -> list[tuple[str, str, str, str]]:
    """(op type, file, handler text, params text) of every `insert` of the crate."""
    out = []
    for rel, text in crate.files.items():
        for m in REG.finditer(text):
            end = matching(text, m.end() - 1, "(", ")")
            inner = text[m.end():end - 1].strip()
            q = re.match(r"\s*\"(\w+)\"\s*,\s*(.*)$", inner, re.S)
            if not q:
                k = inner.split(",")[0].strip()
                if k not in NOT_ONNX:
                    raise SystemExit(f"{crate.name}:{rel}: registration of `{k}` not understood: add it to HAND_PARSERS")
                continue
            out.append((q.group(1), rel, q.group(2).strip().rstrip(",").strip(), ""))
    return out


def handler_reads(crate: Crate, rel: str, handler: str, trace: list) -> tuple[str, set[str]]:
    """A handler is a closure or a path to a fn: its label and the attributes it reads."""
    if handler.startswith("|"):
        bar = handler.index("|", 1)
        params, body = handler[:bar + 1], handler[bar + 1:]
        return f"{rel}:<closure>", reads_of(crate, rel, params, body, set(), trace)
    path, _, name = handler.rpartition("::")
    found = crate.resolve(rel, path, name)
    if not found:
        raise SystemExit(f"{crate.name}:{rel}: parser `{handler}` not found")
    f, key = found[0]
    p, b = crate.fns[(f, key)]
    return f"{f}:{key}", reads_of(crate, f, p, b, {(crate.name, (f, key))}, trace)


def tract_src() -> Path:
    lock = (ROOT / "Cargo.lock").read_text()
    m = re.search(r'name = "tract-onnx"\nversion = "([^"]+)"', lock)
    if not m:
        raise SystemExit("tract-onnx not in Cargo.lock")
    home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    found = sorted(glob.glob(f"{home}/registry/src/*/tract-onnx-{m.group(1)}/src"))
    if not found:
        raise SystemExit(f"tract-onnx {m.group(1)} source not found under {home}/registry/src")
    return Path(found[0])


# ---------------------------------------------------------------------------------------------
# ONNX schemas.

def schema_attrs() -> dict[str, dict[str, list[tuple[int, object]]]]:
    """op -> attribute -> [(since_version, default or None)] over every version defining it."""
    out: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain != "":
            continue
        for name, a in s.attributes.items():
            d = a.default_value
            v = None if d.type == 0 or a.required else (a.type, onnx.helper.get_attribute_value(d))
            out[s.name][name].append((s.since_version, v))
    for op in out.values():
        for lst in op.values():
            lst.sort(key=lambda x: x[0])
    return out


T = onnx.AttributeProto.AttributeType


def rust_default(v) -> str:
    if v is None:
        return "AttrDefault::None"
    ty, val = v
    if ty == T.INT:
        return f"AttrDefault::Int({val})"
    if ty == T.FLOAT:
        bits = struct.unpack("<I", struct.pack("<f", val))[0]
        return f"AttrDefault::Float(0x{bits:08x})"
    if ty == T.STRING:
        s = val.decode() if isinstance(val, bytes) else val
        return f"AttrDefault::String({rust_str(s)})"
    if ty == T.INTS:
        return f"AttrDefault::Ints(&[{', '.join(str(i) for i in val)}])"
    if ty == T.FLOATS:
        bits = [struct.unpack("<I", struct.pack("<f", f))[0] for f in val]
        return f"AttrDefault::Floats(&[{', '.join(f'0x{b:08x}' for b in bits)}])"
    if ty == T.STRINGS:
        return f"AttrDefault::Strings(&[{', '.join(rust_str(s.decode()) for s in val)}])"
    raise SystemExit(f"default of type {ty} not handled")


def rust_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


# ---------------------------------------------------------------------------------------------

def audit():
    tract = Crate("tract", tract_src())
    kes = Crate("kestrel", KESTREL_SRC)
    FALLBACK["kestrel"] = tract
    parsers: dict[str, list[tuple[str, str, set[str]]]] = {}
    traces: dict[str, list[str]] = {}
    for crate in (tract, kes):
        for op, rel, handler, _ in registrations(crate):
            trace: list[str] = []
            label, reads = handler_reads(crate, rel, handler, trace)
            entry = (f"{crate.name}:{label}", handler, reads)
            if crate.name == "kestrel" and op in BOTH_MODES:
                parsers.setdefault(op, []).append(entry)
            else:
                parsers[op] = [entry]
            traces[f"{crate.name}:{label}"] = trace
    for op, lst in HAND_PARSERS.items():
        entries = []
        for crate_name, fn in lst:
            mod, name = fn.split("::")
            files = kes.module_files(mod)
            p, b = kes.fns[(files[0], name)]
            trace = []
            label = f"kestrel:{files[0]}:{name}"
            reads = reads_of(kes, files[0], p, b, set(), trace)
            entries.append((label, fn, reads))
            traces[f"kestrel:{files[0]}:{name}"] = trace
        parsers[op] = entries
    schemas = schema_attrs()
    for op, attrs in HONOURED.items():
        for attr in attrs:
            if attr not in schemas.get(op, {}) or op not in parsers:
                raise SystemExit(f"HONOURED names {op}.{attr}, which ONNX or the importer no longer has")
    for op, attr in TAKEN_AS_DEFAULT:
        if attr not in schemas.get(op, {}):
            raise SystemExit(f"TAKEN_AS_DEFAULT names {op}.{attr}, which ONNX no longer has")
    rows = []
    for op in sorted(schemas):
        if op not in parsers:
            continue  # no parser: refused as an unknown op
        read = set.intersection(*(e[2] for e in parsers[op])) | set(HONOURED.get(op, {}))
        for attr in sorted(schemas[op]):
            if attr in read:
                continue
            rows.append((op, attr, schemas[op][attr]))
    return parsers, traces, rows, schemas


def table(rows) -> str:
    lines = [
        "// Generated by converters/conformance/attr_audit.py — do not edit.",
        "// (python3 converters/conformance/attr_audit.py, or KESTREL_UPDATE_ATTRS=1 cargo test",
        "// --release -p kestrel-rt-onnx --test suite ignored_attrs::)",
        f"// onnx {onnx.__version__}; tract-onnx {tract_src().parent.name.removeprefix('tract-onnx-')}.",
        "",
        "//! The attributes of ONNX's default domain that the importer's parser for the op does not",
        "//! read, with ONNX's default: a node that sets one to another value is refused",
        "//! (`crate::attrs`).",
        "",
        "use crate::attr_types::{AttrDefault, Ignored};",
        "",
        "/// Every (op, attribute) the importer ignores, sorted; an attribute whose default changed",
        "/// between versions has one entry per default, from the version that set it.",
        "pub(crate) const IGNORED: &[Ignored] = &[",
    ]
    for op, attr, versions in rows:
        if (op, attr) in TAKEN_AS_DEFAULT:
            value, why = TAKEN_AS_DEFAULT[(op, attr)]
            lines += [f"    // {line}" for line in textwrap.wrap(f"{op}.{attr}: {why}", 96)]
            versions = [(versions[0][0], value)]
        # One entry per change of default (most attributes: one).
        last = object()
        for since, v in versions:
            if v == last:
                continue
            last = v
            lines.append(f"    Ignored {{ op: {rust_str(op)}, attr: {rust_str(attr)}, since: {since}, "
                         f"default: {rust_default(v)} }},")
    lines.append("];")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stdout", action="store_true", help="print the table instead of writing it")
    ap.add_argument("--report", action="store_true", help="print what each op's parser reads")
    a = ap.parse_args()
    parsers, traces, rows, schemas = audit()
    if a.report:
        flagged = defaultdict(list)
        for op, attr, _ in rows:
            flagged[op].append(attr)
        for op in sorted(parsers):
            if op not in schemas:
                continue
            for label, handler, reads in parsers[op]:
                print(f"{op}: {label}  reads {sorted(reads)}")
                for t in traces.get(label, []):
                    print(f"    {t}")
            if flagged[op]:
                print(f"    IGNORED {flagged[op]}")
        n_ops = len({r[0] for r in rows})
        print(f"{len(rows)} ignored attributes over {n_ops} ops", file=sys.stderr)
        return
    text = table(rows)
    if a.stdout:
        sys.stdout.write(text)
    else:
        TABLE.write_text(text)
        print(f"wrote {TABLE.relative_to(ROOT)}: {len(rows)} (op, attribute) pairs", file=sys.stderr)


if __name__ == "__main__":
    main()
