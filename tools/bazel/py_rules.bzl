"""Python rules of tf_dp's BUILD files: Bazel's native rules, and a py_test
that runs its test file with pytest.

The BUILD files load these through `@rules_python//python:defs.bzl`, which
tools/bazel/repositories.bzl maps here, so they build offline with no
rules_python download.
"""

py_library = native.py_library
py_binary = native.py_binary

def py_test(name, srcs, main = None, deps = [], data = [], args = [], **kwargs):
    """A native py_test that runs `main` (default `<name>.py`) with pytest.

    A pytest file run as a script only defines its tests, so the test's entry
    point is a copy of //tools/bazel:pytest_main.py that calls pytest on it
    (and fails when a first-party module came from outside the runfiles,
    i.e. a missing dep).
    """
    test_file = main or name + ".py"
    runner = name + "_pytest_main"
    native.genrule(
        name = runner,
        srcs = ["@//tools/bazel:pytest_main.py"],
        outs = [runner + ".py"],
        cmd = "cp $< $@",
        visibility = ["//visibility:private"],
        tags = kwargs.get("tags"),
    )
    native.py_test(
        name = name,
        srcs = srcs + [runner + ".py"],
        main = runner + ".py",
        deps = deps,
        data = data + ["@//:pytest.ini"],
        args = ["$(rootpath %s)" % test_file] + args,
        **kwargs
    )
