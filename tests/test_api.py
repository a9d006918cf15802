"""The public surface: exported, documented, and shown in the API reference."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import attention
from tests.conftest import ROOT

REFERENCE = ROOT / "docs" / "reference"
PUBLIC_MODULES = [
    importlib.import_module(f"attention.{m.name}")
    for m in pkgutil.iter_modules(attention.__path__)
    if not m.name.startswith("_")
]
# Modules used through their own namespace: the NumPy reference, whose names would
# collide with the top level (it has its own scaled_dot_product_attention), the
# pages' worked examples, which are teaching data, not the mechanism, and the
# sequence-parallel functions, which only work inside a torch.distributed process group.
NAMESPACED = {"attention.numpy_reference", "attention.examples", "attention.distributed"}
EXPORTED_MODULES = [m for m in PUBLIC_MODULES if m.__name__ not in NAMESPACED]
PUBLIC_OBJECTS = {
    f"{module.__name__}.{name}": getattr(module, name)
    for module in PUBLIC_MODULES
    for name in module.__all__
}


DIRECTIVE = r"^::: (attention\.[\w.]+)\n((?:[ \t]+.*\n?)*)"


def documented_in_reference() -> set[str]:
    """Qualified names rendered by mkdocstrings: `::: attention.module` with `members:`,
    or one object on its own, `::: attention.module.name`."""
    names: set[str] = set()
    for page in REFERENCE.glob("*.md"):
        text = page.read_text()
        for block in re.finditer(
            r"^::: (attention\.[\w.]+)\n((?:[ \t]+.*\n?)*)", text, re.MULTILINE
        ):
            path = block.group(1)
            if path.rsplit(".", 1)[1] in getattr(
                importlib.import_module(path.rsplit(".", 1)[0]), "__all__", ()
            ):
                names.add(path)
                continue
            members = re.findall(r"^\s+- (\w+)\s*$", block.group(2), re.MULTILINE)
            names.update(f"{path}.{member}" for member in members)
    return names


def test_all_lists_exactly_the_public_names_of_the_public_modules():
    from_modules = {name for module in EXPORTED_MODULES for name in module.__all__}
    assert set(attention.__all__) == from_modules
    for name in attention.__all__:
        assert getattr(attention, name) is not None


def test_namespaced_modules_are_importable_from_the_package():
    for name in NAMESPACED:
        assert getattr(attention, name.rsplit(".", 1)[1]).__name__ == name


def test_every_module_lists_only_names_it_defines():
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            assert getattr(module, name).__module__ == module.__name__, (module, name)


def test_every_public_name_is_on_a_reference_page():
    missing = set(PUBLIC_OBJECTS) - documented_in_reference()
    assert not missing, f"add these to a docs/reference/ page: {sorted(missing)}"


def required_sections(func) -> list[str]:
    """The Google sections a callable's docstring needs, judged from its signature."""
    signature = inspect.signature(func)
    params = [p for p in signature.parameters if p not in ("self", "cls")]
    sections = ["Args:"] if params else []
    if signature.return_annotation not in (None, "None", inspect.Signature.empty):
        sections.append("Returns:")
    return sections


@pytest.mark.parametrize("name", sorted(PUBLIC_OBJECTS))
def test_every_public_name_has_a_full_google_docstring(name):
    obj = PUBLIC_OBJECTS[name]
    doc = inspect.getdoc(obj)
    assert doc, f"{name} has no docstring"
    if inspect.isclass(obj):
        needed = [*required_sections(obj.__init__), "Examples:"]
        for method_name in vars(obj):
            if method_name.startswith("_") or not callable(getattr(obj, method_name)):
                continue
            method_doc = inspect.getdoc(getattr(obj, method_name))
            assert method_doc, f"{name}.{method_name} has no docstring"
            for section in required_sections(getattr(obj, method_name)):
                assert section in method_doc, f"{name}.{method_name} has no {section} section"
    else:
        needed = [*required_sections(obj), "Raises:", "Examples:"]
    for section in needed:
        assert section in doc, f"{name}'s docstring has no {section} section"
    assert ">>> " in doc


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_every_public_module_has_a_docstring(module):
    assert inspect.getdoc(module)


def test_the_version_has_one_home():
    """Git, through setuptools-scm at build: pyproject.toml declares it dynamic, the
    package reads it from its installed metadata, and neither writes a number."""
    import importlib.metadata

    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert attention.__version__ == importlib.metadata.version("attention-by-running")
    source = (ROOT / "attention" / "__init__.py").read_text()
    assert not re.search(r'__version__ = "\d+\.', source), "a version number written by hand"


def test_docstrings_parse_as_mkdocstrings_renders_them(caplog):
    """Each Returns section is one item (a continuation line at the item's indent would
    become a second, bogus row in the API table) and the parser has no complaints."""
    griffe = pytest.importorskip("griffe")
    package = griffe.load("attention", search_paths=[str(ROOT)], docstring_parser="google")
    problems = []

    def visit(obj):
        if obj.docstring is not None:
            with caplog.at_level("WARNING"):
                sections = obj.docstring.parse("google")
            for section in sections:
                if section.kind.value == "returns" and len(section.value) != 1:
                    problems.append(f"{obj.path}: Returns has {len(section.value)} items")
        for member in obj.members.values():
            if not member.is_alias and not member.name.startswith("_"):
                visit(member)

    visit(package)
    problems += [f"parser: {record.getMessage()}" for record in caplog.records]
    assert not problems, "\n".join(problems)


def test_importing_the_package_imports_neither_torch_dynamo_nor_matplotlib():
    """`torch.nn.attention.bias` imports torch._dynamo: 1.1 s of a 3.3 s import, paid by
    every tutorial kernel, script and test process; CausalBias is recognised without it.
    matplotlib is loaded by the first plot, not by the import."""
    import subprocess
    import sys

    code = (
        "import sys, attention; print('torch._dynamo' in sys.modules, 'matplotlib' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False False"


def test_first_calls_do_not_import_sympy():
    """`torch.broadcast_shapes` imports sympy on its first call (through torch's
    symbolic shapes): 487 modules, half a second, which every fresh process (a reader's
    script, each child of the memory how-to) paid on its first attention call before
    the package broadcast shapes itself."""
    import subprocess
    import sys

    code = """
import sys, torch, attention
q = k = v = torch.randn(1, 2, 8, 4)
x = torch.randn(1, 4, 8)
layout = attention.strided_layout(2, stride=1)
calls = {
    "scaled_dot_product_attention": lambda: attention.scaled_dot_product_attention(
        q, k, v, is_causal=True
    ),
    "flash_attention": lambda: attention.flash_attention(q, k, v, is_causal=True),
    "sliding_window_attention": lambda: attention.sliding_window_attention(
        q, k, v, window=3
    ),
    "block_sparse_attention": lambda: attention.block_sparse_attention(
        q, k, v, layout, 4, is_causal=True
    ),
    "linear_attention": lambda: attention.linear_attention(q, k, v),
    "MultiHeadAttention": lambda: attention.MultiHeadAttention(8, 2)(x, x, x),
}
for name, call in calls.items():
    call()
    if "sympy" in sys.modules:
        print(name)
        break
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"sympy imported by {result.stdout.strip()}"
