// A `wasi:http/proxy` handler in JavaScript, for ephem's tests (see build.sh): it echoes the
// method, the path, the request's `x-` headers and the body's length; `/missing…` is a 404.
addEventListener("fetch", (event) => event.respondWith(handle(event.request)));

async function handle(request) {
  const url = new URL(request.url);
  const body = await request.text();
  const lines = [`${request.method} ${url.pathname}${url.search}`];
  for (const [k, v] of request.headers) {
    if (k.startsWith("x-")) lines.push(`${k}: ${v}`);
  }
  lines.push(`body ${body.length}`);
  return new Response(lines.join("\n") + "\n", {
    status: url.pathname.startsWith("/missing") ? 404 : 200,
    headers: { "content-type": "text/plain", "x-handled-by": "js" },
  });
}
