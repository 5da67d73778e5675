import textwrap

import pytest

from polyrl.domains import Domain, Registry, UnknownDomainError, parse_id
from polyrl.domains.math import Arithmetic
from polyrl.domains.registry import BUILTIN_MODULES, default_registry, get_domain, list_domains


def test_parse_id():
    assert parse_id("math/arith-v1") == ("math", "arith", 1)
    assert parse_id("recall/needle-1m-v12") == ("recall", "needle-1m", 12)
    for bad in ("arith-v1", "math/arith", "Math/arith-v1", "math/arith-vx", "math//a-v1"):
        with pytest.raises(ValueError, match="family/name-vN"):
            parse_id(bad)


def test_unversioned_lookup_resolves_to_highest_version():
    reg = Registry(modules=[], entry_points=False)
    v1 = reg.register(Arithmetic("math/toy-v1"))
    v10 = reg.register(Arithmetic("math/toy-v10"))
    v2 = reg.register(Arithmetic("math/toy-v2"))
    assert reg.get("math/toy") is v10  # numeric, not lexical: 10 > 2
    assert reg.get("math/toy-v2") is v2 and reg.get("math/toy-v1") is v1
    reg.unregister("math/toy-v10")
    assert reg.get("math/toy") is v2
    assert [d.id for d in reg.list()] == ["math/toy-v1", "math/toy-v2"]
    assert "math/toy" in reg and "math/nope" not in reg and len(reg) == 2


def test_unknown_id_names_close_matches():
    reg = Registry(modules=[], entry_points=False)
    reg.register(Arithmetic("math/arith-v1"))
    with pytest.raises(UnknownDomainError) as info:
        reg.get("math/arth-v1")
    assert "unknown domain id 'math/arth-v1'" in str(info.value)
    assert "math/arith-v1" in info.value.suggestions
    assert isinstance(info.value, KeyError)
    with pytest.raises(UnknownDomainError, match="polyrl domains list"):
        reg.get("zzz/qqq-v9")


def test_register_rejects_bad_domains():
    reg = Registry(modules=[], entry_points=False)
    reg.register(Arithmetic("math/a-v1"))
    with pytest.raises(ValueError, match="already registered"):
        reg.register(Arithmetic("math/a-v1"))
    replacement = reg.register(Arithmetic("math/a-v1"), replace=True)
    assert reg.get("math/a-v1") is replacement
    with pytest.raises(ValueError, match="family attribute 'math'"):
        reg.register(Arithmetic("code/a-v1"))
    with pytest.raises(ValueError, match="family/name-vN"):
        reg.register(Arithmetic("math/no-version"))
    with pytest.raises(TypeError, match="Domain instance"):
        reg.register("math/a-v2")  # type: ignore[arg-type]


def _write(path, text):
    path.write_text(textwrap.dedent(text))


def _dist_info(site, name, entry_points):
    """An installed distribution ``name`` in ``site`` declaring ``entry_points``
    (``"name = module:attr"`` lines) in the ``polyrl.domains`` group."""
    dist = site / f"{name.replace('-', '_')}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[polyrl.domains]\n" + "\n".join(entry_points) + "\n")


def test_missing_and_broken_family_modules_are_skipped_with_reasons(tmp_path, monkeypatch):
    _write(tmp_path / "fam_ok.py", """
        from polyrl.domains.math import Arithmetic
        class _A(Arithmetic):
            family = "ok"
        def builtin_domains():
            return [_A("ok/a-v1"), _A("ok/a-v2")]
    """)
    _write(tmp_path / "fam_needs_dep.py", "import polyrl_no_such_dependency_xyz\n")
    _write(tmp_path / "fam_raises.py", "def builtin_domains():\n    raise RuntimeError('boom')\n")
    _write(tmp_path / "fam_no_fn.py", "X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry(
        modules=["fam_ok", "fam_needs_dep", "fam_raises", "fam_no_fn", "fam_does_not_exist"],
        entry_points=False,
    )
    assert [d.id for d in reg.list()] == ["ok/a-v1", "ok/a-v2"]
    why = reg.skipped()
    assert why["fam_does_not_exist"] == "not built yet (module not found)"
    assert "missing dependency 'polyrl_no_such_dependency_xyz'" in why["fam_needs_dep"]
    assert why["fam_raises"] == "RuntimeError: boom"
    assert "no builtin_domains()" in why["fam_no_fn"]
    assert "fam_ok" not in why


def test_entry_points_instance_subclass_and_factory(tmp_path, monkeypatch):
    _write(tmp_path / "polyrl_plugin_demo.py", """
        from polyrl.domains.math import Arithmetic
        class Plug(Arithmetic):
            family = "plug"
            def __init__(self, domain_id="plug/cls-v1"):
                super().__init__(domain_id)
        INSTANCE = Plug("plug/inst-v1")
        def factory():
            return [Plug("plug/fac-v1"), Plug("plug/fac-v2")]
        def bad_factory():
            return [1, 2]
    """)
    _dist_info(tmp_path, "polyrl-plugin-x", [
        "inst = polyrl_plugin_demo:INSTANCE", "cls = polyrl_plugin_demo:Plug",
        "fac = polyrl_plugin_demo:factory", "bad = polyrl_plugin_demo:bad_factory",
        "gone = polyrl_plugin_missing_module:thing"])
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry(modules=[], entry_points=True)
    ids = [d.id for d in reg.list()]
    assert {"plug/inst-v1", "plug/cls-v1", "plug/fac-v1", "plug/fac-v2"} <= set(ids)
    assert reg.get("plug/fac").id == "plug/fac-v2"
    why = reg.skipped()
    assert "non-Domain" in why["entry point bad"]
    assert "entry point gone" in why


def test_builtin_registry_has_math_and_recall_and_never_crashes():
    ids = {d.id for d in list_domains()}
    assert {"math/arith-v1", "math/gsm8k-v1", "recall/needle-v1", "recall/needle-1m-v1"} <= ids
    assert get_domain("math/arith").id == "math/arith-v1"
    assert isinstance(get_domain("recall/needle-8k"), Domain)
    skipped = default_registry().skipped()
    loaded_families = {d.family for d in list_domains()}
    for module in BUILTIN_MODULES:  # every built-in family either loaded or says why not
        family = module.rsplit(".", 1)[-1]
        assert family in loaded_families or module in skipped, module


def test_versioned_lookup_imports_only_its_family(tmp_path, monkeypatch):
    import sys

    _write(tmp_path / "famfast.py", """
        from polyrl.domains.math import Arithmetic
        class _A(Arithmetic):
            family = "famfast"
        def builtin_domains():
            return [_A("famfast/a-v1")]
    """)
    _write(tmp_path / "famslow.py", "raise RuntimeError('must not be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry(modules=["famfast", "famslow"], entry_points=False)
    assert reg.get("famfast/a-v1").id == "famfast/a-v1"
    assert "famslow" not in sys.modules and "famslow" not in reg._skipped
    assert reg.get("famfast/a").id == "famfast/a-v1"  # unversioned: loads every source
    assert reg.skipped() == {"famslow": "RuntimeError: must not be imported"}
    assert [d.id for d in reg.list()] == ["famfast/a-v1"]  # famfast is not imported twice


def test_unknown_id_names_plugins_that_failed_to_load(tmp_path, monkeypatch):
    """A plugin whose import fails is the likely provider of an unknown id: say why it
    was skipped (the family heuristic only covers built-in modules), and tell a missing
    plugin module apart from a missing dependency of the plugin."""
    _write(tmp_path / "polyrl_plugin_broken.py", "import polyrl_no_such_dependency_xyz\n")
    _dist_info(tmp_path, "polyrl-plugin-b", ["units = polyrl_plugin_broken:UnitConversion",
                                             "typo = polyrl_plugin_brokn:UnitConversion"])
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry(modules=[], entry_points=True)
    reg.register(Arithmetic("math/arith-v1"))
    with pytest.raises(UnknownDomainError) as info:
        reg.get("units/convert-v1")
    msg = str(info.value)
    assert "plugin skipped" in msg
    assert "entry point units: missing dependency 'polyrl_no_such_dependency_xyz'" in msg
    why = reg.skipped()["entry point typo"]
    assert "'polyrl_plugin_brokn'" in why and "not found" in why and "installed" in why
    assert "missing dependency" not in why
