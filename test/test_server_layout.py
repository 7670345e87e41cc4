"""The server's parts do not reach into the node: configure builds a ServerRuntime and the node hands it on
(ros/server/runtime.py); no module of ros/server/ but node.py assigns a field of the node."""
from __future__ import annotations

import ast
from pathlib import Path

SERVER = Path(__file__).resolve().parents[1] / "timely_llm_ros" / "ros" / "server"


def _node_field_writes(path: Path) -> list[str]:
    """``node.x = ...`` / ``self._node.x = ...`` / ``setattr(node, ...)`` in a module, as 'file:line'."""
    out = []
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, (ast.AugAssign,
                                                                                           ast.AnnAssign)) else []
        for t in targets:
            for leaf in ast.walk(t):
                if isinstance(leaf, ast.Attribute) and ast.unparse(leaf.value) in ("node", "self._node"):
                    out.append(f"{path.name}:{n.lineno}")
        if (isinstance(n, ast.Call) and ast.unparse(n.func) == "setattr" and n.args
                and ast.unparse(n.args[0]) in ("node", "self._node")):
            out.append(f"{path.name}:{n.lineno}")
    return out


def test_no_module_of_the_server_but_the_node_writes_the_nodes_fields():
    modules = [p for p in sorted(SERVER.glob("*.py")) if p.name != "node.py"]
    assert len(modules) >= 10
    assert [w for p in modules for w in _node_field_writes(p)] == []


def test_the_check_sees_a_write_to_the_node(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f(node):\n    node.scheduler = None\n    setattr(node, 'loop', 1)\n")
    assert _node_field_writes(probe) == ["probe.py:2", "probe.py:3"]
