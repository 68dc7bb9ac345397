/* A tiny C port of RoPE (half layout, fp32) for the judge test (docs/golden-format.md, "Judging a port").
 *
 * usage: rope_port IN.safetensors OUT.safetensors ROTARY_DIM BASE BUG
 * Reads inputs.x (F32, [..., S, D]) and inputs.positions (I64, [S]) from IN, writes outputs.out (F32,
 * x's shape) to OUT. BUG=1 plants an off-by-one: the angle of position p+1 is used at position p.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int ndim; long shape[8]; long begin, end; } entry;

static int find_entry(const char *hdr, const char *key, entry *e) {
    char quoted[128];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *k = strstr(hdr, quoted);
    if (!k) return -1;
    const char *open = strchr(k, '{'), *close = strchr(k, '}');
    if (!open || !close) return -1;
    const char *s = strstr(open, "\"shape\"");
    const char *o = strstr(open, "\"data_offsets\"");
    if (!s || !o || s > close || o > close) return -1;
    s = strchr(s, '[') + 1;
    e->ndim = 0;
    while (*s != ']') {
        char *after;
        long v = strtol(s, &after, 10);
        if (after == s) { s++; continue; }
        e->shape[e->ndim++] = v;
        s = after;
    }
    o = strchr(o, '[') + 1;
    char *after;
    e->begin = strtol(o, &after, 10);
    e->end = strtol(strchr(after, ',') + 1, NULL, 10);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: %s IN OUT ROTARY_DIM BASE BUG\n", argv[0]); return 2; }
    int rd = atoi(argv[3]);
    double base = atof(argv[4]);
    int bug = atoi(argv[5]);
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    uint64_t n;
    if (fread(&n, 8, 1, f) != 1) return 2;
    char *hdr = calloc(n + 1, 1);
    if (fread(hdr, 1, n, f) != n) return 2;
    fseek(f, 0, SEEK_END);
    long data_size = ftell(f) - 8 - (long)n;
    unsigned char *data = malloc(data_size);
    fseek(f, 8 + (long)n, SEEK_SET);
    if (fread(data, 1, data_size, f) != (size_t)data_size) return 2;
    fclose(f);
    entry ex, ep;
    if (find_entry(hdr, "inputs.x", &ex) || find_entry(hdr, "inputs.positions", &ep)) {
        fprintf(stderr, "%s: inputs.x or inputs.positions missing\n", argv[1]);
        return 2;
    }
    const float *x = (const float *)(data + ex.begin);
    const int64_t *pos = (const int64_t *)(data + ep.begin);
    long d = ex.shape[ex.ndim - 1], npos = ep.shape[0], count = (ex.end - ex.begin) / 4, rows = count / d;
    float *y = malloc(count * 4);
    int half = rd / 2;
    for (long r = 0; r < rows; r++) {
        const float *xr = x + r * d;
        float *yr = y + r * d;
        float p = (float)(pos[r % npos] + bug);
        memcpy(yr, xr, d * 4); /* channels from rotary_dim on pass through */
        for (int i = 0; i < half; i++) {
            float inv_freq = (float)(1.0 / pow(base, (2.0 * i) / rd));
            float angle = p * inv_freq, c = cosf(angle), s = sinf(angle);
            yr[i] = xr[i] * c - xr[i + half] * s;
            yr[i + half] = xr[i + half] * c + xr[i] * s;
        }
    }
    /* the output: one F32 tensor "outputs.out", header padded with spaces to a multiple of 8 */
    char out_hdr[512], shape[256] = "";
    for (int i = 0; i < ex.ndim; i++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%ld", i ? "," : "", ex.shape[i]);
    int len = snprintf(out_hdr, sizeof out_hdr,
                       "{\"outputs.out\":{\"dtype\":\"F32\",\"shape\":[%s],\"data_offsets\":[0,%ld]}}", shape,
                       count * 4);
    while (len % 8) out_hdr[len++] = ' ';
    uint64_t out_n = (uint64_t)len;
    FILE *g = fopen(argv[2], "wb");
    if (!g) { perror(argv[2]); return 2; }
    fwrite(&out_n, 8, 1, g);
    fwrite(out_hdr, 1, len, g);
    fwrite(y, 4, count, g);
    fclose(g);
    free(hdr); free(data); free(y);
    return 0;
}
