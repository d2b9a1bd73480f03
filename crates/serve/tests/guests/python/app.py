# A `wasi:http/proxy` handler in Python, for ephem's tests (see build.sh): it echoes the method,
# the path, the request's `x-` headers and the body's length and first bytes; `/missing…` is a
# 404; `/big` adds 1 MiB written in 4 KiB pieces (wasmtime takes at most 4096 bytes a write).
from wit_world import exports
from wit_world.imports.types import (
    IncomingRequest, ResponseOutparam, OutgoingResponse, Fields, OutgoingBody, Method_Other,
)
from componentize_py_types import Ok, Err


class IncomingHandler(exports.IncomingHandler):
    def handle(self, request: IncomingRequest, response_out: ResponseOutparam) -> None:
        method = request.method()
        name = type(method).__name__.removeprefix("Method_").upper()
        if isinstance(method, Method_Other):
            name = method.value
        path = request.path_with_query() or ""
        fields = request.headers()
        headers = fields.entries()
        fields.__exit__(None, None, None)
        incoming = request.consume()
        stream = incoming.stream()
        data = b""
        while True:
            try:
                data += stream.blocking_read(65536)
            except Err:
                break
        stream.__exit__(None, None, None)
        incoming.__exit__(None, None, None)
        lines = [f"{name} {path}"]
        lines += [f"{k}: {v.decode()}" for k, v in headers if k.startswith("x-")]
        lines.append(f"body {len(data)} {data[:32]!r}")
        text = ("\n".join(lines) + "\n").encode()
        response = OutgoingResponse(Fields.from_list([
            ("content-type", b"text/plain"),
            ("x-handled-by", b"python"),
        ]))
        response.set_status_code(404 if path.startswith("/missing") else 200)
        body = response.body()
        ResponseOutparam.set(response_out, Ok(response))
        out = body.write()
        out.blocking_write_and_flush(text)
        if path.startswith("/big"):
            chunk = b"0123456789abcdef" * 256
            for _ in range(256):
                out.blocking_write_and_flush(chunk)
        out.__exit__(None, None, None)
        OutgoingBody.finish(body, None)
