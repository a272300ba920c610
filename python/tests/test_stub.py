"""The type stub (``maestro_core/__init__.pyi``) against the module: every public name of
the module is in the stub and every name of the stub exists, with the same kind (class,
function, constant), function parameters by name, and the public attributes of each
class. The stub is written by hand; this keeps it honest."""

import ast
import inspect
import pathlib

import maestro_core as M

STUB = pathlib.Path(M.__file__).with_name("__init__.pyi")


def stub_items():
    """Top-level names of the stub: name -> the AST node that defines it."""
    tree = ast.parse(STUB.read_text())
    items = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            items[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            items[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    items[t.id] = node
    return items


def public(names):
    return {n for n in names if not n.startswith("_")}


def test_the_stub_lists_every_public_name_and_no_other():
    stub = public(stub_items())
    module = public(n for n in dir(M) if not inspect.ismodule(getattr(M, n)))
    assert module - stub == set(), "in the module, missing from the stub"
    assert stub - module == set(), "in the stub, missing from the module"


def test_each_name_has_the_kind_the_stub_gives_it():
    for name, node in stub_items().items():
        if name.startswith("_"):
            continue
        value = getattr(M, name)
        if isinstance(node, ast.ClassDef):
            assert inspect.isclass(value), name
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert callable(value) and not inspect.isclass(value), name
        else:
            assert not callable(value), f"{name} is a constant in the stub"


def parameters(node):
    a = node.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]


def test_functions_take_the_parameters_the_stub_names():
    checked = 0
    for name, node in stub_items().items():
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        try:
            signature = inspect.signature(getattr(M, name))
        except (TypeError, ValueError):
            continue  # a builtin without a text signature
        assert list(signature.parameters) == parameters(node), name
        checked += 1
    assert checked > 40, f"only {checked} signatures could be read"


def test_classes_have_the_attributes_the_stub_lists():
    for name, node in stub_items().items():
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(M, name)
        for member in node.body:
            attr = None
            if isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                attr = member.target.id
            elif isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                attr = member.name
            if attr is None or (attr.startswith("__") and attr.endswith("__")):
                continue
            # An exception's fields are set per instance; everything else is on the class.
            assert hasattr(cls, attr) or issubclass(cls, Exception), f"{name}.{attr}"
