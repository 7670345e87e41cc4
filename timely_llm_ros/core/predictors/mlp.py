"""A small numpy MLP (ReLU, Adam) for regression (MSE) or classification (softmax cross-entropy).

Saved as an .npz of float32 weights plus the input/target normalisation, so inference needs only numpy.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np


class MLP:
    """Fully connected ReLU network; kind 'regression' (one output) or 'classifier' (n_out classes)."""

    def __init__(self, n_in: int, hidden: Sequence[int], n_out: int = 1, kind: str = "regression",
                 seed: int = 0) -> None:
        if kind not in ("regression", "classifier"):
            raise ValueError(f"MLP kind must be 'regression' or 'classifier', got {kind!r}")
        rng = np.random.default_rng(seed)
        sizes = [n_in, *hidden, n_out]
        self.kind = kind
        self.W = [rng.normal(0, np.sqrt(2.0 / a), (a, b)).astype(np.float32) for a, b in zip(sizes, sizes[1:])]
        self.b = [np.zeros(b, np.float32) for b in sizes[1:]]
        self.x_mean = np.zeros(n_in, np.float32)
        self.x_std = np.ones(n_in, np.float32)
        self.y_mean = 0.0
        self.y_std = 1.0

    def _forward(self, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        acts = [x]
        for i, (w, b) in enumerate(zip(self.W, self.b)):
            x = x @ w + b
            if i < len(self.W) - 1:
                x = np.maximum(x, 0.0)
            acts.append(x)
        return x, acts

    def fit(self, X: np.ndarray, y: np.ndarray, epochs: int = 100, lr: float = 1e-4, batch: int = 32,
            seed: int = 0) -> list[float]:
        """Adam on mini-batches; returns the training loss of each epoch."""
        X = np.asarray(X, np.float32)
        self.x_mean, self.x_std = X.mean(0), X.std(0) + 1e-6
        Xn = (X - self.x_mean) / self.x_std
        if self.kind == "regression":
            y = np.asarray(y, np.float32)
            self.y_mean, self.y_std = float(y.mean()), float(y.std() + 1e-6)
            target = ((y - self.y_mean) / self.y_std)[:, None]
        else:
            target = np.eye(self.W[-1].shape[1], dtype=np.float32)[np.asarray(y, int)]
        params = [*self.W, *self.b]
        m = [np.zeros_like(p) for p in params]
        v = [np.zeros_like(p) for p in params]
        rng = np.random.default_rng(seed)
        t, losses = 0, []
        for _ in range(epochs):
            order = rng.permutation(len(Xn))
            total = 0.0
            for s in range(0, len(order), batch):
                idx = order[s:s + batch]
                out, acts = self._forward(Xn[idx])
                if self.kind == "regression":
                    diff = out - target[idx]
                    total += float((diff ** 2).sum())
                    grad = 2 * diff / len(idx)
                else:
                    p = np.exp(out - out.max(1, keepdims=True))
                    p /= p.sum(1, keepdims=True)
                    total += float(-(target[idx] * np.log(p + 1e-9)).sum())
                    grad = (p - target[idx]) / len(idx)
                gw, gb = [None] * len(self.W), [None] * len(self.b)
                for i in range(len(self.W) - 1, -1, -1):
                    gw[i] = acts[i].T @ grad
                    gb[i] = grad.sum(0)
                    if i:
                        grad = (grad @ self.W[i].T) * (acts[i] > 0)
                t += 1
                for j, (p_, g) in enumerate(zip(params, [*gw, *gb])):
                    m[j] = 0.9 * m[j] + 0.1 * g
                    v[j] = 0.999 * v[j] + 0.001 * g * g
                    p_ -= lr * (m[j] / (1 - 0.9 ** t)) / (np.sqrt(v[j] / (1 - 0.999 ** t)) + 1e-8)
            losses.append(total / len(Xn))
        return losses

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Regression: predicted targets; classifier: class probabilities."""
        X = (np.atleast_2d(np.asarray(X, np.float32)) - self.x_mean) / self.x_std
        out, _ = self._forward(X)
        if self.kind == "regression":
            return out[:, 0] * self.y_std + self.y_mean
        p = np.exp(out - out.max(1, keepdims=True))
        return p / p.sum(1, keepdims=True)

    def save(self, path: str | Path, **meta: float) -> None:
        arrays = {f"W{i}": w for i, w in enumerate(self.W)} | {f"b{i}": b for i, b in enumerate(self.b)}
        np.savez_compressed(path, kind=np.array(self.kind), x_mean=self.x_mean, x_std=self.x_std,
                            y_norm=np.array([self.y_mean, self.y_std], np.float64),
                            meta_keys=np.array(list(meta)), meta_vals=np.array(list(meta.values()), np.float64),
                            **arrays)

    @classmethod
    def load(cls, path: str | Path) -> tuple["MLP", dict[str, float]]:
        with np.load(path) as z:
            n = sum(1 for k in z.files if k.startswith("W"))
            W = [z[f"W{i}"] for i in range(n)]
            net = cls(W[0].shape[0], [w.shape[1] for w in W[:-1]], W[-1].shape[1], str(z["kind"]))
            net.W, net.b = W, [z[f"b{i}"] for i in range(n)]
            net.x_mean, net.x_std = z["x_mean"], z["x_std"]
            net.y_mean, net.y_std = (float(v) for v in z["y_norm"])
            meta = {str(k): float(v) for k, v in zip(z["meta_keys"], z["meta_vals"])}
        return net, meta
