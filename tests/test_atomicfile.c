/*
 * test_atomicfile.c - the one atomic-write helper (util/atomicfile.c,
 * k25_atomic_finish): every temporary-then-rename writer of the project
 * (k25_afile, h5store, bench's JSON summary, inspect's trace, the report's
 * files, k25 gold) ends through it.
 *
 *   - a finished write leaves the file with its bytes and no temporary;
 *   - a write the caller marks failed leaves the old file exactly as it
 *     was and no temporary;
 *   - a rename that cannot happen (a folder in the way) is named as the
 *     rename, and leaves no temporary;
 *   - the closed-file variant (HDF5) names the missing temporary;
 *   - the folder's fsync names the folder it could not open.
 */
#include "testutil.h"

#include "k25util.h"

#include <sys/stat.h>
#include <unistd.h>

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static char *slurp(const char *p)
{
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    static char buf[256];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* path (600 bytes) and its temporary tmp (700) in the group's folder */
static void paths(const char *name, char *path, char *tmp)
{
    snprintf(path, 600, "%s/%s", tu_dir, name);
    snprintf(tmp, 700, "%s.tmp.%ld", path, (long)getpid());
}

static void test_finish_writes_and_renames(void **state)
{
    (void)state;
    char path[600], tmp[700];
    paths("ok.txt", path, tmp);
    FILE *f = fopen(tmp, "wb");
    assert_non_null(f);
    fputs("hello\n", f);
    struct k25_error err = {0};
    assert_int_equal(k25_atomic_finish(f, tmp, path, true, &err), K25_OK);
    assert_string_equal(slurp(path), "hello\n");
    assert_false(exists(tmp));
    /* the k25_afile front end goes the same way */
    assert_int_equal(k25_write_text_atomic(path, "again", &err), K25_OK);
    assert_string_equal(slurp(path), "again\n");
    assert_false(exists(tmp));
}

static void test_failed_write_keeps_the_old_file(void **state)
{
    (void)state;
    char path[600], tmp[700];
    paths("keep.txt", path, tmp);
    tu_write_file(path, "old");
    FILE *f = fopen(tmp, "wb");
    assert_non_null(f);
    fputs("half a ne", f);
    struct k25_error err = {0};
    assert_int_equal(k25_atomic_finish(f, tmp, path, false, &err), K25_EIO);
    assert_string_equal(slurp(path), "old");
    assert_false(exists(tmp));
}

static void test_rename_failure_is_named(void **state)
{
    (void)state;
    char path[600], tmp[700], inner[700];
    paths("dir-in-the-way", path, tmp);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(inner, sizeof(inner), "%s/x", path); /* not empty: rename(2) cannot replace it */
    tu_write_file(inner, "x");
    FILE *f = fopen(tmp, "wb");
    assert_non_null(f);
    fputs("data", f);
    struct k25_error err = {0};
    assert_int_equal(k25_atomic_finish(f, tmp, path, true, &err), K25_EIO);
    assert_non_null(strstr(err.msg, "cannot rename"));
    assert_string_equal(err.file, path);
    assert_false(exists(tmp));
}

static void test_closed_variant_names_the_temporary(void **state)
{
    (void)state;
    char path[600], tmp[700];
    paths("never-written.h5", path, tmp);
    struct k25_error err = {0};
    assert_int_equal(k25_atomic_finish_closed(tmp, path, &err), K25_EIO);
    assert_non_null(strstr(err.msg, "cannot reopen"));
    assert_non_null(strstr(err.msg, tmp));
    assert_false(exists(path));
    /* and a complete one goes through */
    tu_write_file(tmp, "h5");
    assert_int_equal(k25_atomic_finish_closed(tmp, path, &err), K25_OK);
    assert_string_equal(slurp(path), "h5");
    assert_false(exists(tmp));
}

static void test_fsync_dir_names_the_folder(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof(path), "%s/no-such-folder/file", tu_dir);
    struct k25_error err = {0};
    assert_int_equal(k25_fsync_dir(path, &err), K25_EIO);
    assert_non_null(strstr(err.msg, "no-such-folder"));
    snprintf(path, sizeof(path), "%s/file", tu_dir);
    assert_int_equal(k25_fsync_dir(path, &err), K25_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finish_writes_and_renames),
        cmocka_unit_test(test_failed_write_keeps_the_old_file),
        cmocka_unit_test(test_rename_failure_is_named),
        cmocka_unit_test(test_closed_variant_names_the_temporary),
        cmocka_unit_test(test_fsync_dir_names_the_folder),
    };
    return cmocka_run_group_tests_name("atomicfile", tests, tu_group_setup, tu_group_teardown);
}
