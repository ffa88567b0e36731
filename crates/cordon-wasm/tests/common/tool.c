/* One WASI command with many behaviours, chosen by argv[1]: the test modules of cordon-wasm
 * and of the CLI's wasm suites. Built by the tests with Debian's clang + wasi-libc. */
#define _GNU_SOURCE /* strcasestr */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>

extern char **environ;

static int cat(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("ERR %s: %s\n", path, strerror(errno));
        return 1;
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
    fclose(f);
    return 0;
}

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) {
        printf("ERR %s: %s\n", path, strerror(errno));
        return 1;
    }
    if (fputs(text, f) < 0 || fclose(f) != 0) {
        printf("ERR %s: %s\n", path, strerror(errno));
        return 1;
    }
    printf("wrote %s\n", path);
    return 0;
}

/* Fills a file until the filesystem refuses; prints how far it got. */
static int fill(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        printf("ERR %s: %s\n", path, strerror(errno));
        return 1;
    }
    static char block[65536];
    memset(block, 'x', sizeof block);
    long long total = 0;
    for (;;) {
        ssize_t w = write(fd, block, sizeof block);
        if (w < 0) {
            printf("full after %lld bytes: %s\n", total, strerror(errno));
            close(fd);
            return 0;
        }
        total += w;
    }
}

static int recurse(int n) {
    volatile char pad[256];
    pad[0] = (char)n;
    return recurse(n + 1) + pad[0];
}

static volatile unsigned long long sink;

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "hello";
    if (!strcmp(mode, "hello")) {
        printf("hello from wasm");
        for (int i = 2; i < argc; i++) printf(" [%s]", argv[i]);
        printf("\n");
        return 0;
    }
    if (!strcmp(mode, "exit") && argc > 2) return atoi(argv[2]);
    if (!strcmp(mode, "cat") && argc > 2) return cat(argv[2]);
    if (!strcmp(mode, "write") && argc > 3) return write_file(argv[2], argv[3]);
    if (!strcmp(mode, "fill") && argc > 2) return fill(argv[2]);
    if (!strcmp(mode, "env")) {
        /* Not the egress proxy's variables: a process gets them (its proxy refuses and
           reports what it tried), a module has no network to point them at. */
        for (char **e = environ; *e; e++)
            if (!strcasestr(*e, "_proxy=")) printf("%s\n", *e);
        return 0;
    }
    if (!strcmp(mode, "ls") && argc > 2) {
        DIR *d = opendir(argv[2]);
        if (!d) {
            printf("ERR %s: %s\n", argv[2], strerror(errno));
            return 1;
        }
        struct dirent *e;
        while ((e = readdir(d))) printf("%s\n", e->d_name);
        closedir(d);
        return 0;
    }
    if (!strcmp(mode, "spin")) {
        for (;;) sink++;
    }
    if (!strcmp(mode, "grow")) {
        /* 1 MiB at a time, each page touched, until refused. The blocks are kept where the
         * compiler must assume someone reads them, or it drops the allocations. */
        static char *volatile kept[1 << 16];
        for (long mb = 0;; mb++) {
            char *p = malloc(1 << 20);
            if (!p) {
                printf("malloc refused after %ld MiB\n", mb);
                return 2;
            }
            memset(p, 1, 1 << 20);
            kept[mb & 0xffff] = p;
        }
    }
    if (!strcmp(mode, "flood") && argc > 2) {
        long long n = atoll(argv[2]);
        static char line[4096];
        memset(line, 'y', sizeof line);
        while (n > 0) {
            long long k = n < (long long)sizeof line ? n : (long long)sizeof line;
            fwrite(line, 1, (size_t)k, stdout);
            n -= k;
        }
        fflush(stdout);
        fprintf(stderr, "flood done\n");
        return 0;
    }
    if (!strcmp(mode, "recurse")) return recurse(0);
    if (!strcmp(mode, "stdin")) {
        int c;
        long n = 0;
        while ((c = getchar()) != EOF) {
            putchar(c >= 'a' && c <= 'z' ? c - 32 : c);
            n++;
        }
        printf("\n%ld bytes\n", n);
        return 0;
    }
    if (!strcmp(mode, "stderr")) {
        fprintf(stderr, "to stderr\n");
        printf("to stdout\n");
        return 5;
    }
    if (!strcmp(mode, "abort")) abort();
    if (!strcmp(mode, "compute") && argc > 2) {
        /* CPU-bound: a simple LCG-driven sieve-ish workload, same in native and wasm. */
        long n = atol(argv[2]);
        unsigned long long x = 1, acc = 0;
        for (long i = 0; i < n; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            acc += (x >> 33) % 1000003;
        }
        printf("%llu\n", acc);
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 64;
}
