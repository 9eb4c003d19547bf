"""Recurrent layers: LSTM (ONNX version 14; float operands).

Layout 0: X is (seq, batch, input), Y (seq, directions, batch, hidden); layout 1 puts batch
first: X (batch, seq, input), Y (batch, seq, directions, hidden) and the states
(batch, directions, hidden). W is (directions, 4H, input) and R (directions, 4H, H), gates
in the order i, o, f, c; B (directions, 8H) is Wb then Rb; P (directions, 3H) the peepholes
i, o, f.
"""

from __future__ import annotations

from lowbit.ir.graph import Node
from lowbit.ir.types import Dim, TensorType
from lowbit.ops.elementwise_rules import FLOATS, check_dtype, known_types, same_dtype
from lowbit.ops.registry import Attr, OpDef, Work, fail, flag, numel, register

ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu",
               "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus")
DIRECTIONS = ("forward", "reverse", "bidirectional")


@register
class LSTM(OpDef):
    """For each direction and step t (with f, g, h the three activations, default Sigmoid,
    Tanh, Tanh, and `clip` bounding the gates' pre-activations when given):

        i = f(X_t Wi^T + H Ri^T + Wbi + Rbi + Pi * C)
        f_t = f(X_t Wf^T + H Rf^T + Wbf + Rbf + Pf * C)      (1 - i with input_forget)
        c = g(X_t Wc^T + H Rc^T + Wbc + Rbc)
        C = f_t * C + i * c
        o = f(X_t Wo^T + H Ro^T + Wbo + Rbo + Po * C)
        H = o * h(C)

    A batch entry stops at its `sequence_lens`: later Y rows are 0 and Y_h, Y_c keep its
    last step. Computed in float64, each output rounded once to X's dtype.
    """

    op_type = "LSTM"
    inputs = ("X", "W", "R", "B?", "sequence_lens?", "initial_h?", "initial_c?", "P?")
    outputs = ("Y?", "Y_h?", "Y_c?")
    attrs = {"activation_alpha": Attr("floats"), "activation_beta": Attr("floats"),
             "activations": Attr("strings"), "clip": Attr("float"),
             "direction": Attr("string", "forward", choices=DIRECTIONS),
             "hidden_size": Attr("int", low=1), "input_forget": flag(0), "layout": flag(0)}
    min_version = 7

    def check(self, node: Node, in_types: list[TensorType | None]) -> None:
        acts = node.attrs.get("activations")
        count = 6 if node.attrs["direction"] == "bidirectional" else 3
        if acts is not None:
            if len(acts) != count:
                raise fail(node, f"activations {acts} must name {count} functions (f, g, h "
                                 f"per direction)")
            unknown = [a for a in acts if a not in ACTIVATIONS]
            if unknown:
                raise fail(node, f"unknown activation(s) {unknown}; known: "
                                 f"{', '.join(ACTIVATIONS)}")
        clip = node.attrs.get("clip")
        if clip is not None and not clip > 0:
            raise fail(node, f"clip must be positive, got {clip}")

    def infer(self, node: Node, in_types: list[TensorType | None]) -> list[TensorType]:
        types = (known_types(node, in_types) + [None] * 8)[:8]
        x, w, r = types[0], types[1], types[2]
        assert x is not None and w is not None and r is not None
        for i in (0, 1, 2, 3, 5, 6, 7):
            if types[i] is not None:
                check_dtype(node, i, types[i], FLOATS)  # type: ignore[arg-type]
        same_dtype(node, types, [0, 1, 2, 3, 5, 6, 7])
        dirs = 2 if node.attrs["direction"] == "bidirectional" else 1
        hidden: Dim = node.attrs.get("hidden_size")
        if w.shape is not None:
            if len(w.shape) != 3:
                raise fail(node, f"W must be (directions, 4*hidden, input), got {w.shape}")
            if isinstance(w.shape[0], int) and w.shape[0] != dirs:
                raise fail(node, f"W has {w.shape[0]} directions; direction "
                                 f"'{node.attrs['direction']}' has {dirs}")
            rows = w.shape[1]
            if isinstance(rows, int):
                if rows % 4 or (hidden is not None and rows != 4 * hidden):
                    raise fail(node, f"W has {rows} rows; 4 gates of hidden_size {hidden} "
                                     f"need {4 * hidden if hidden else 'a multiple of 4'}")
                hidden = rows // 4
        if x.shape is not None and len(x.shape) != 3:
            raise fail(node, f"X must have rank 3, got shape {x.shape}")
        for i, name, cols in ((2, "R", hidden), (3, "B", None), (7, "P", None)):
            t = types[i]
            if t is not None and t.shape is not None and len(t.shape) != (3 if i == 2 else 2):
                raise fail(node, f"{name} has shape {t.shape}")
            if i == 2 and t is not None and t.shape is not None and \
                    isinstance(t.shape[2], int) and isinstance(cols, int) and t.shape[2] != cols:
                raise fail(node, f"R has {t.shape[2]} columns for hidden_size {cols}")
        batch_first = bool(node.attrs["layout"])
        seq, batch = (None, None) if x.shape is None else (
            (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1]))
        y = (batch, seq, dirs, hidden) if batch_first else (seq, dirs, batch, hidden)
        state = (batch, dirs, hidden) if batch_first else (dirs, batch, hidden)
        return [TensorType(x.dtype, y), TensorType(x.dtype, state), TensorType(x.dtype, state)]

    def work(self, node: Node, in_types: list[TensorType | None],
             out_types: list[TensorType | None]) -> Work:
        """Per step and direction, two products of 4H rows: (input + hidden) * 4H * batch."""
        x, w, r = in_types[0], in_types[1], in_types[2]
        if x is None or w is None or r is None or w.numel is None or r.numel is None:
            return Work(numel(out_types[0]))
        steps = numel(x) // max(1, w.shape[2]) if w.shape and isinstance(w.shape[2], int) \
            else 0  # type: ignore[index]
        ops = steps * (w.numel + r.numel)
        return Work(ops, 8 * (numel(out_types[0]) + 8 * numel(out_types[1])))
