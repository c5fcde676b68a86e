"""The gRPC API reference: services, rpcs, messages and fields of ``proto/``, with their
comments, read by protoc itself (the pinned ``grpcio-tools``) into a descriptor set
that keeps the source's comments."""

from __future__ import annotations

import tempfile
from importlib import resources
from pathlib import Path

from google.protobuf import descriptor_pb2 as d

PROTO_DIR = Path(__file__).resolve().parents[3] / "proto"
# field numbers of the descriptor protos, as paths into SourceCodeInfo count them
FILE_MESSAGE, FILE_SERVICE, FILE_ENUM = 4, 6, 5
MSG_FIELD, MSG_NESTED, MSG_ENUM = 2, 3, 4
SERVICE_METHOD, ENUM_VALUE = 2, 2
TYPES = {v: k.removeprefix("TYPE_").lower() for k, v in d.FieldDescriptorProto.Type.items()}


def descriptor_set(proto_dir: Path = PROTO_DIR) -> d.FileDescriptorSet:
    """Every ``grouper/v1/*.proto`` compiled with its comments."""
    from grpc_tools import protoc

    protos = sorted((proto_dir / "grouper" / "v1").glob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        well_known = resources.files("grpc_tools") / "_proto"
        args = ["protoc", f"-I{proto_dir}", f"-I{well_known}", "--include_source_info",
                f"--descriptor_set_out={out}", *(str(p) for p in protos)]  # fmt: skip
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on proto/")
        return d.FileDescriptorSet.FromString(out.read_bytes())


def comments(f: d.FileDescriptorProto) -> dict[tuple[int, ...], str]:
    """Source path -> the comment before the element, or else the one after it."""
    out = {}
    for loc in f.source_code_info.location:
        text = loc.leading_comments.strip() or loc.trailing_comments.strip()
        if text:
            out[tuple(loc.path)] = " ".join(line.strip() for line in text.splitlines())
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;")


def _type(field: d.FieldDescriptorProto) -> str:
    # ".grouper.v1.StageEvent.Kind" -> "StageEvent.Kind", the heading of a nested type
    name = field.type_name.removeprefix(".grouper.v1.") if field.type_name else TYPES[field.type]
    link = f"[`{name}`](#{name.lower()})" if field.type_name else f"`{name}`"
    return f"repeated {link}" if field.label == field.LABEL_REPEATED else link


def enum(e: d.EnumDescriptorProto, path: tuple[int, ...], notes: dict, prefix: str) -> list:
    name = f"{prefix}{e.name}"
    lines = [f"### `{name}` {{#{name.lower()}}}", "", notes.get(path, ""), ""]
    lines += ["| value | number | meaning |", "|---|---|---|"]
    for i, v in enumerate(e.value):
        lines.append(
            f"| `{v.name}` | {v.number} | {_cell(notes.get((*path, ENUM_VALUE, i), ''))} |"
        )
    return [*lines, ""]


def message(m: d.DescriptorProto, path: tuple[int, ...], notes: dict, prefix: str = "") -> list:
    name = f"{prefix}{m.name}"
    lines = [f"### `{name}` {{#{name.lower()}}}", ""]
    if notes.get(path):
        lines += [notes[path], ""]
    if m.field:
        lines += ["| field | number | type | meaning |", "|---|---|---|---|"]
        for i, f in enumerate(m.field):
            oneof = f" (one of `{m.oneof_decl[f.oneof_index].name}`)" if f.HasField(
                "oneof_index") else ""  # fmt: skip
            note = _cell(notes.get((*path, MSG_FIELD, i), "")) + oneof
            lines.append(f"| `{f.name}` | {f.number} | {_type(f)} | {note} |")
        lines.append("")
    else:
        lines += ["No fields.", ""]
    for i, e in enumerate(m.enum_type):
        lines += enum(e, (*path, MSG_ENUM, i), notes, f"{name}.")
    for i, nested in enumerate(m.nested_type):
        lines += message(nested, (*path, MSG_NESTED, i), notes, f"{name}.")
    return lines


def service(s: d.ServiceDescriptorProto, path: tuple[int, ...], notes: dict) -> list[str]:
    lines = [f"## Service `{s.name}` {{#service-{s.name.lower()}}}", ""]
    if notes.get(path):
        lines += [notes[path], ""]
    lines += ["| rpc | request | reply | meaning |", "|---|---|---|---|"]
    for i, r in enumerate(s.method):
        req, rep = (t.rsplit(".", 1)[-1] for t in (r.input_type, r.output_type))
        req_s = "stream " if r.client_streaming else ""
        rep_s = "stream " if r.server_streaming else ""
        note = _cell(notes.get((*path, SERVICE_METHOD, i), ""))
        lines.append(f"| `{r.name}` | {req_s}[`{req}`](#{req.lower()}) | "
                     f"{rep_s}[`{rep}`](#{rep.lower()}) | {note} |")  # fmt: skip
    return [*lines, ""]


def grpc_page() -> str:
    lines = [
        "# gRPC API",
        "",
        "The agent's two services, read from `proto/grouper/v1/` (package `grouper.v1`): "
        "`Registry`, on the Unix socket `agent.socket`, is what training jobs call; "
        "`Agent`, on `agent.port`, is what the coordinator calls. Each message is a "
        "heading whose anchor is its name in lower case: `#jobregistration`.",
        "",
    ]
    for f in descriptor_set().file:
        notes = comments(f)
        for i, s in enumerate(f.service):
            lines += service(s, (FILE_SERVICE, i), notes)
        lines += ["## Messages", ""]
        for i, m in enumerate(f.message_type):
            lines += message(m, (FILE_MESSAGE, i), notes)
        for i, e in enumerate(f.enum_type):
            lines += enum(e, (FILE_ENUM, i), notes, "")
    return "\n".join(lines)
