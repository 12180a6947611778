"""Local repositories that let tf_dp's BUILD files load with no network.

* `@rules_python`: only `//python:defs.bzl`, re-exporting
  //tools/bazel:py_rules.bzl (Bazel's native Python rules), so
  `load("@rules_python//python:defs.bzl", ...)` needs no download.
* `@rules_cc`, `@rules_java`: only `//cc:defs.bzl` and `//java:defs.bzl`,
  re-exporting Bazel's native rules. Nothing of tf_dp is C++ or Java, but
  @bazel_tools//tools/cpp and //tools/jdk (toolchains that every py_test
  resolves) load them, and Bazel's default for both is a GitHub download.
* `@no_coverage_tools`: what .bazelrc's --coverage_report_generator names
  instead of Bazel's default, @remote_coverage_tools (a download that every
  test target depends on). `bazel coverage` is not supported.
* `@pip`: the Python interpreter of a virtual environment, given by the
  environment variable TF_DP_PYTHON (an absolute path such as
  /path/to/.venv-tf221/bin/python; `bazel ... --repo_env=TF_DP_PYTHON=...`),
  as a registered Python toolchain, and `requirements.bzl` whose
  `requirement(name)` is a no-op py_library: third-party packages come from
  that interpreter's site-packages, not from Bazel. There is one target per
  distribution installed in the venv or named in a requirements file, so a
  BUILD file that names anything else fails to build.
"""

def _rules_python_impl(rctx):
    rctx.file("WORKSPACE", 'workspace(name = "rules_python")\n')
    rctx.file("BUILD", "")
    rctx.file("python/BUILD", "")
    rctx.file("python/defs.bzl", "\n".join([
        '"""Offline stand-in for rules_python: Bazel\'s native Python rules."""',
        "",
        'load("@//tools/bazel:py_rules.bzl", _py_binary = "py_binary", ' +
        '_py_library = "py_library", _py_test = "py_test")',
        "",
        "py_binary = _py_binary",
        "py_library = _py_library",
        "py_test = _py_test",
        "",
    ]))

local_rules_python = repository_rule(
    implementation = _rules_python_impl,
    doc = "@rules_python with only python/defs.bzl (native rules).",
)

def _native_rules_impl(rctx):
    package = rctx.attr.package
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD", "")
    rctx.file(package + "/BUILD", "\n".join([
        'package(default_visibility = ["//visibility:public"])',
        "",
        "alias(",
        '    name = "toolchain_type",',
        '    actual = "@bazel_tools//tools/%s:toolchain_type",' % rctx.attr.bazel_tools_package,
        ")",
        "",
    ]))
    rctx.file(package + "/defs.bzl", "\n".join(
        ['"""Offline stand-in for %s: Bazel\'s native rules."""' % rctx.name, ""] +
        ["%s = native.%s" % (r, r) for r in rctx.attr.rules],
    ) + "\n")

native_rules = repository_rule(
    implementation = _native_rules_impl,
    attrs = {
        "package": attr.string(doc = "cc or java"),
        "bazel_tools_package": attr.string(doc = "cpp or jdk"),
        "rules": attr.string_list(doc = "native rules that defs.bzl exports"),
    },
    doc = "@rules_cc or @rules_java with only <package>/defs.bzl.",
)

def _no_coverage_tools_impl(rctx):
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("no_coverage.sh", "\n".join([
        "#!/bin/sh",
        'echo "bazel coverage needs @remote_coverage_tools, a download" >&2',
        "exit 1",
        "",
    ]), executable = True)
    rctx.file("BUILD", "\n".join([
        'package(default_visibility = ["//visibility:public"])',
        "",
        "sh_binary(",
        '    name = "coverage_report_generator",',
        '    srcs = ["no_coverage.sh"],',
        ")",
        "",
    ]))

no_coverage_tools = repository_rule(
    implementation = _no_coverage_tools_impl,
    doc = "A coverage_report_generator that fails: no coverage offline.",
)

_LIST_DISTRIBUTIONS = """
import importlib.metadata as m, sys
print("%d.%d" % sys.version_info[:2])
for d in m.distributions():
    print(d.metadata["Name"], d.version)
"""

def pip_name(name):
    """PEP 503 name, as in pip: lower case, runs of -_. become one -."""
    out = name.lower().replace("_", "-").replace(".", "-")
    for _ in range(len(out)):
        if "--" not in out:
            break
        out = out.replace("--", "-")
    return out

def _requirement_names(text):
    names = []
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        for stop in ["=", "<", ">", "!", "~", ";", "[", " ", "@"]:
            line = line.split(stop)[0]
        names.append(line.strip())
    return names

def _venv_python_impl(rctx):
    python = rctx.os.environ.get("TF_DP_PYTHON", "")
    if not python:
        fail("Set TF_DP_PYTHON to a virtual environment's python, e.g. " +
             "bazel build --repo_env=TF_DP_PYTHON=$PWD/.venv-tf221/bin/python " +
             "//... (scripts/bazel_check.sh does).")
    if not python.startswith("/"):
        fail("TF_DP_PYTHON must be an absolute path, got %r" % python)
    result = rctx.execute([python, "-c", _LIST_DISTRIBUTIONS])
    if result.return_code:
        fail("TF_DP_PYTHON=%s does not run: %s" % (python, result.stderr))
    lines = result.stdout.strip().splitlines()
    version = lines[0]
    installed = {}
    for line in lines[1:]:
        name, dist_version = line.rsplit(" ", 1)
        installed[pip_name(name)] = dist_version
    listed = []
    for f in rctx.attr.requirement_files:
        listed += [pip_name(n) for n in _requirement_names(rctx.read(f))]

    build = [
        "# Generated by //tools/bazel:repositories.bzl from TF_DP_PYTHON=%s" % python,
        "# (Python %s)." % version,
        'load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")',
        "",
        'package(default_visibility = ["//visibility:public"])',
        "",
        "exports_files([\"requirements.bzl\"])",
        "",
        "py_runtime(",
        '    name = "py3_runtime",',
        '    interpreter_path = "%s",' % python,
        '    python_version = "PY3",',
        '    stub_shebang = "#!%s",' % python,
        ")",
        "",
        'py_runtime_pair(name = "runtime_pair", py3_runtime = ":py3_runtime")',
        "",
        "toolchain(",
        '    name = "python_toolchain",',
        '    toolchain = ":runtime_pair",',
        '    toolchain_type = "@bazel_tools//tools/python:toolchain_type",',
        ")",
        "",
        "# requirement() targets: no files, the package is in the venv.",
    ]
    for name in sorted({n: None for n in installed.keys() + listed}.keys()):
        build.append('py_library(name = "%s", tags = ["%s"])' % (
            name,
            "version=" + installed[name] if name in installed else "not_installed",
        ))
    rctx.file("BUILD", "\n".join(build) + "\n")
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("requirements.bzl", "\n".join([
        '"""requirement(name): the no-op target of a package of TF_DP_PYTHON\'s venv."""',
        "",
        'load("@//tools/bazel:repositories.bzl", "pip_name")',
        "",
        "def requirement(name):",
        '    """Label of the package `name` (as pip spells it) in @%s."""' % rctx.name,
        '    return "@%s//:" + pip_name(name)' % rctx.name,
        "",
    ]))

venv_python = repository_rule(
    implementation = _venv_python_impl,
    environ = ["TF_DP_PYTHON"],
    local = True,
    attrs = {
        "requirement_files": attr.label_list(
            allow_files = True,
            doc = "pip requirements files whose names get targets even " +
                  "when this venv lacks them (other stacks' packages).",
        ),
    },
    doc = "Python toolchain and requirement() of the venv at TF_DP_PYTHON.",
)

def tf_dp_repositories():
    """All of tf_dp's external repositories; call from WORKSPACE."""
    native_rules(
        name = "rules_cc",
        package = "cc",
        bazel_tools_package = "cpp",
        rules = [
            "cc_binary",
            "cc_import",
            "cc_library",
            "cc_proto_library",
            "cc_test",
            "cc_toolchain",
            "cc_toolchain_suite",
            "fdo_prefetch_hints",
            "fdo_profile",
            "objc_import",
            "objc_library",
        ],
    )
    native_rules(
        name = "rules_java",
        package = "java",
        bazel_tools_package = "jdk",
        rules = [
            "java_binary",
            "java_import",
            "java_library",
            "java_lite_proto_library",
            "java_package_configuration",
            "java_plugin",
            "java_proto_library",
            "java_runtime",
            "java_test",
            "java_toolchain",
        ],
    )
    local_rules_python(name = "rules_python")
    no_coverage_tools(name = "no_coverage_tools")
    venv_python(
        name = "pip",
        requirement_files = [
            "@//:requirements/tf215.txt",
            "@//:requirements/tf221.txt",
        ],
    )
    native.register_toolchains("@pip//:python_toolchain")
