// A `wasi:http/proxy` handler in C (wit-bindgen's bindings), for ephem's tests: every answer
// depends only on the request, so `ephem serve` and `wasmtime serve` can be compared.
//
//   any path       echoes the method, path, scheme, the request's `x-` headers, whether a
//                  forbidden header reached the handler, and the body's length and FNV-1a hash
//   /fields        works `fields` over: from-list, append, get, set, has, delete, clone, and
//                  the errors (invalid syntax, forbidden, immutable), one line each
//   /status/N      answers with status N
//   /length        answers with a content-length
//   /stream/N      N chunks of 4096 bytes, written after the response is set
//   /early         three chunks written before the response is set (wasmtime 49 waits for
//                  them to be read, which they cannot be yet: ephem only)
//   /none          returns without setting a response
//   /error         sets `err(internal-error)`
//   /trap          traps before answering
//   /trap-after    answers, writes a chunk, then traps

#include <stdlib.h>
#include <string.h>
#include "proxy.h"

typedef struct { char *p; size_t len, cap; } buf_t;

static void put(buf_t *b, const char *s, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}
static void puts_(buf_t *b, const char *s) { put(b, s, strlen(s)); }
static void putn(buf_t *b, long long n) {
    char tmp[24];
    int i = sizeof tmp;
    unsigned long long u = n < 0 ? -(unsigned long long)n : (unsigned long long)n;
    do { tmp[--i] = '0' + u % 10; u /= 10; } while (u);
    if (n < 0) tmp[--i] = '-';
    put(b, tmp + i, sizeof tmp - i);
}

static proxy_string_t str(const char *s) {
    proxy_string_t r = { (uint8_t *)s, strlen(s) };
    return r;
}

static const char *method_name(wasi_http_types_method_t *m) {
    static const char *names[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT",
                                  "OPTIONS", "TRACE", "PATCH"};
    return m->tag < 9 ? names[m->tag] : "OTHER";
}

// One line per fields operation: its name and the result (`ok`, `err N`, or a value).
static void fields_report(buf_t *b, wasi_http_types_borrow_incoming_request_t req) {
    wasi_http_types_header_error_t err;
    wasi_http_types_own_fields_t f;

    wasi_http_types_field_name_t n1 = str("x-a"), n2 = str("bad name");
    wasi_http_types_tuple2_field_name_field_value_t pairs[2] = {
        {n1, {(uint8_t *)"1", 1}}, {n2, {(uint8_t *)"2", 1}}};
    wasi_http_types_list_tuple2_field_name_field_value_t list = {pairs, 2};
    puts_(b, "from-list bad name: ");
    if (wasi_http_types_static_fields_from_list(&list, &f, &err)) {
        puts_(b, "ok\n");
        wasi_http_types_fields_drop_own(f);
    } else {
        puts_(b, "err "); putn(b, err.tag); puts_(b, "\n");
    }

    wasi_http_types_tuple2_field_name_field_value_t conn[1] = {
        {str("Connection"), {(uint8_t *)"close", 5}}};
    list.ptr = conn; list.len = 1;
    puts_(b, "from-list connection: ");
    if (wasi_http_types_static_fields_from_list(&list, &f, &err)) {
        puts_(b, "ok\n");
        wasi_http_types_fields_drop_own(f);
    } else {
        puts_(b, "err "); putn(b, err.tag); puts_(b, "\n");
    }

    wasi_http_types_tuple2_field_name_field_value_t upper[1] = {
        {str("X-Upper"), {(uint8_t *)"V", 1}}};
    list.ptr = upper; list.len = 1;
    wasi_http_types_static_fields_from_list(&list, &f, &err);
    wasi_http_types_borrow_fields_t fb = wasi_http_types_borrow_fields(f);

    wasi_http_types_field_name_t xb = str("x-b"), XB = str("X-B");
    wasi_http_types_field_value_t v1 = {(uint8_t *)"1", 1}, v2 = {(uint8_t *)"2", 1};
    puts_(b, "append: ");
    putn(b, wasi_http_types_method_fields_append(fb, &xb, &v1, &err));
    putn(b, wasi_http_types_method_fields_append(fb, &XB, &v2, &err));
    puts_(b, "\n");

    wasi_http_types_list_field_value_t got;
    wasi_http_types_method_fields_get(fb, &xb, &got);
    puts_(b, "get x-b:");
    for (size_t i = 0; i < got.len; i++) {
        puts_(b, " ");
        put(b, (char *)got.ptr[i].ptr, got.ptr[i].len);
    }
    puts_(b, "\n");
    wasi_http_types_list_field_value_free(&got);

    wasi_http_types_field_value_t three = {(uint8_t *)"3", 1};
    wasi_http_types_list_field_value_t one = {&three, 1};
    puts_(b, "set: ");
    putn(b, wasi_http_types_method_fields_set(fb, &xb, &one, &err));
    puts_(b, " has: ");
    putn(b, wasi_http_types_method_fields_has(fb, &XB));
    puts_(b, "\n");

    wasi_http_types_list_tuple2_field_name_field_value_t entries;
    wasi_http_types_method_fields_entries(fb, &entries);
    puts_(b, "entries:");
    for (size_t i = 0; i < entries.len; i++) {
        puts_(b, " ");
        put(b, (char *)entries.ptr[i].f0.ptr, entries.ptr[i].f0.len);
        puts_(b, "=");
        put(b, (char *)entries.ptr[i].f1.ptr, entries.ptr[i].f1.len);
    }
    puts_(b, "\n");
    wasi_http_types_list_tuple2_field_name_field_value_free(&entries);

    puts_(b, "delete: ");
    putn(b, wasi_http_types_method_fields_delete(fb, &xb, &err));
    puts_(b, " has: ");
    putn(b, wasi_http_types_method_fields_has(fb, &xb));
    puts_(b, "\n");

    wasi_http_types_field_name_t host = str("host");
    wasi_http_types_field_value_t h = {(uint8_t *)"example.com", 11};
    puts_(b, "append host: ");
    if (wasi_http_types_method_fields_append(fb, &host, &h, &err)) puts_(b, "ok\n");
    else { puts_(b, "err "); putn(b, err.tag); puts_(b, "\n"); }

    wasi_http_types_field_value_t crlf = {(uint8_t *)"a\r\nb", 4};
    puts_(b, "append crlf: ");
    if (wasi_http_types_method_fields_append(fb, &xb, &crlf, &err)) puts_(b, "ok\n");
    else { puts_(b, "err "); putn(b, err.tag); puts_(b, "\n"); }
    wasi_http_types_fields_drop_own(f);

    wasi_http_types_own_headers_t rh = wasi_http_types_method_incoming_request_headers(req);
    wasi_http_types_borrow_fields_t rhb = wasi_http_types_borrow_fields(rh);
    puts_(b, "request headers append: ");
    if (wasi_http_types_method_fields_append(rhb, &xb, &v1, &err)) puts_(b, "ok\n");
    else { puts_(b, "err "); putn(b, err.tag); puts_(b, "\n"); }
    wasi_http_types_own_fields_t copy = wasi_http_types_method_fields_clone(rhb);
    wasi_http_types_borrow_fields_t cb = wasi_http_types_borrow_fields(copy);
    puts_(b, "clone append: ");
    putn(b, wasi_http_types_method_fields_append(cb, &xb, &v1, &err));
    puts_(b, " has: ");
    putn(b, wasi_http_types_method_fields_has(cb, &xb));
    puts_(b, "\n");
    wasi_http_types_fields_drop_own(copy);
    wasi_http_types_fields_drop_own(rh);
}

static void echo(buf_t *b, wasi_http_types_borrow_incoming_request_t req,
                 wasi_http_types_method_t *m, proxy_string_t *path) {
    puts_(b, "method ");
    puts_(b, method_name(m));
    if (m->tag == WASI_HTTP_TYPES_METHOD_OTHER) {
        puts_(b, " ");
        put(b, (char *)m->val.other.ptr, m->val.other.len);
    }
    puts_(b, "\npath ");
    put(b, (char *)path->ptr, path->len);
    wasi_http_types_scheme_t scheme;
    puts_(b, "\nscheme ");
    if (wasi_http_types_method_incoming_request_scheme(req, &scheme)) putn(b, scheme.tag);
    else puts_(b, "none");
    puts_(b, "\n");

    wasi_http_types_own_headers_t headers = wasi_http_types_method_incoming_request_headers(req);
    wasi_http_types_list_tuple2_field_name_field_value_t entries;
    wasi_http_types_method_fields_entries(wasi_http_types_borrow_fields(headers), &entries);
    int forbidden = 0;
    for (size_t i = 0; i < entries.len; i++) {
        proxy_string_t *n = &entries.ptr[i].f0;
        if (n->len == 4 && memcmp(n->ptr, "host", 4) == 0) forbidden++;
        if (n->len == 10 && memcmp(n->ptr, "connection", 10) == 0) forbidden++;
        if (n->len >= 2 && memcmp(n->ptr, "x-", 2) == 0) {
            puts_(b, "header ");
            put(b, (char *)n->ptr, n->len);
            puts_(b, ": ");
            put(b, (char *)entries.ptr[i].f1.ptr, entries.ptr[i].f1.len);
            puts_(b, "\n");
        }
    }
    puts_(b, "forbidden seen ");
    putn(b, forbidden);
    puts_(b, "\n");
    wasi_http_types_list_tuple2_field_name_field_value_free(&entries);
    wasi_http_types_fields_drop_own(headers);

    wasi_http_types_own_incoming_body_t body;
    uint32_t hash = 2166136261u;
    long long len = 0;
    if (wasi_http_types_method_incoming_request_consume(req, &body)) {
        wasi_http_types_own_input_stream_t in;
        if (wasi_http_types_method_incoming_body_stream(wasi_http_types_borrow_incoming_body(body), &in)) {
            for (;;) {
                proxy_list_u8_t chunk;
                wasi_io_streams_stream_error_t err;
                if (!wasi_io_streams_method_input_stream_blocking_read(
                        wasi_io_streams_borrow_input_stream(in), 65536, &chunk, &err))
                    break;
                for (size_t i = 0; i < chunk.len; i++) hash = (hash ^ chunk.ptr[i]) * 16777619u;
                len += chunk.len;
                proxy_list_u8_free(&chunk);
            }
            wasi_io_streams_input_stream_drop_own(in);
        }
        wasi_http_types_own_future_trailers_t t = wasi_http_types_static_incoming_body_finish(body);
        wasi_io_poll_own_pollable_t ready =
            wasi_http_types_method_future_trailers_subscribe(wasi_http_types_borrow_future_trailers(t));
        wasi_io_poll_method_pollable_block(wasi_io_poll_borrow_pollable(ready));
        wasi_io_poll_pollable_drop_own(ready);
        wasi_http_types_result_result_option_own_trailers_error_code_void_t got;
        puts_(b, "trailers ");
        if (wasi_http_types_method_future_trailers_get(wasi_http_types_borrow_future_trailers(t), &got))
            puts_(b, !got.is_err && !got.val.ok.is_err && !got.val.ok.val.ok.is_some ? "none" : "other");
        else
            puts_(b, "pending");
        puts_(b, "\n");
        wasi_http_types_future_trailers_drop_own(t);
    }
    puts_(b, "body ");
    putn(b, len);
    puts_(b, " ");
    putn(b, hash);
    puts_(b, "\n");
}

static int starts(proxy_string_t *p, const char *prefix) {
    size_t n = strlen(prefix);
    return p->len >= n && memcmp(p->ptr, prefix, n) == 0;
}

static long long number_after(proxy_string_t *p, size_t at) {
    long long n = 0;
    for (size_t i = at; i < p->len && p->ptr[i] >= '0' && p->ptr[i] <= '9'; i++)
        n = n * 10 + (p->ptr[i] - '0');
    return n;
}

static void write_all(wasi_http_types_own_output_stream_t out, const char *data, size_t len) {
    while (len > 0) {
        size_t n = len < 4096 ? len : 4096;
        proxy_list_u8_t chunk = {(uint8_t *)data, n};
        wasi_io_streams_stream_error_t err;
        if (!wasi_io_streams_method_output_stream_blocking_write_and_flush(
                wasi_io_streams_borrow_output_stream(out), &chunk, &err))
            return;
        data += n;
        len -= n;
    }
}

void exports_wasi_http_incoming_handler_handle(
    exports_wasi_http_incoming_handler_own_incoming_request_t request,
    exports_wasi_http_incoming_handler_own_response_outparam_t response_out) {
    wasi_http_types_borrow_incoming_request_t req = wasi_http_types_borrow_incoming_request(request);
    wasi_http_types_method_t m;
    wasi_http_types_method_incoming_request_method(req, &m);
    proxy_string_t path = {(uint8_t *)"", 0};
    wasi_http_types_method_incoming_request_path_with_query(req, &path);

    if (starts(&path, "/none")) return;
    if (starts(&path, "/trap-after")) {
        // Handled below, after the head is sent.
    } else if (starts(&path, "/trap")) {
        __builtin_trap();
    }
    if (starts(&path, "/error")) {
        wasi_http_types_result_own_outgoing_response_error_code_t r;
        r.is_err = true;
        r.val.err.tag = WASI_HTTP_TYPES_ERROR_CODE_INTERNAL_ERROR;
        r.val.err.val.internal_error.is_some = true;
        r.val.err.val.internal_error.val = str("boom");
        wasi_http_types_static_response_outparam_set(response_out, &r);
        return;
    }

    buf_t text = {0};
    if (starts(&path, "/fields")) fields_report(&text, req);
    else echo(&text, req, &m, &path);

    buf_t length = {0};
    putn(&length, (long long)text.len);
    wasi_http_types_tuple2_field_name_field_value_t hs[3] = {
        {str("content-type"), {(uint8_t *)"text/plain", 10}},
        {str("x-handled-by"), {(uint8_t *)"c", 1}},
        {str("content-length"), {(uint8_t *)length.p, length.len}}};
    wasi_http_types_list_tuple2_field_name_field_value_t hl = {hs, starts(&path, "/length") ? 3 : 2};
    wasi_http_types_own_fields_t headers;
    wasi_http_types_header_error_t herr;
    wasi_http_types_static_fields_from_list(&hl, &headers, &herr);
    wasi_http_types_own_outgoing_response_t resp = wasi_http_types_constructor_outgoing_response(headers);
    wasi_http_types_borrow_outgoing_response_t rb = wasi_http_types_borrow_outgoing_response(resp);
    if (starts(&path, "/status/"))
        wasi_http_types_method_outgoing_response_set_status_code(rb, (uint16_t)number_after(&path, 8));
    wasi_http_types_own_outgoing_body_t body;
    wasi_http_types_method_outgoing_response_body(rb, &body);
    wasi_http_types_own_output_stream_t out;
    wasi_http_types_method_outgoing_body_write(wasi_http_types_borrow_outgoing_body(body), &out);

    int early = starts(&path, "/early");
    if (early) {
        for (int i = 0; i < 3; i++) write_all(out, "early chunk\n", 12);
    }
    wasi_http_types_result_own_outgoing_response_error_code_t r;
    r.is_err = false;
    r.val.ok = resp;
    wasi_http_types_static_response_outparam_set(response_out, &r);

    write_all(out, text.p, text.len);
    if (starts(&path, "/stream/")) {
        long long n = number_after(&path, 8);
        char chunk[4096];
        for (long long i = 0; i < n; i++) {
            memset(chunk, 'a' + (i % 26), sizeof chunk);
            write_all(out, chunk, sizeof chunk);
        }
    }
    if (starts(&path, "/trap-after")) __builtin_trap();
    wasi_io_streams_output_stream_drop_own(out);
    wasi_http_types_error_code_t ferr;
    wasi_http_types_static_outgoing_body_finish(body, NULL, &ferr);
    free(text.p);
    free(length.p);
    wasi_http_types_incoming_request_drop_own(request);
}
