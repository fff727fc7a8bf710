"""Train a tiny numpy classifier on synthetic data; returns the validation accuracy.

Single run / local sweep with Hydra's basic launcher:

    python examples/train.py
    python examples/train.py -m optimizer.lr=0.1,0.01 model=small,large

The same sweep through SEML (one Slurm array job, results tracked in MongoDB),
or with ``seml_local`` on a laptop without Slurm:

    python examples/train.py -m hydra/launcher=seml optimizer.lr=0.1,0.01 model=small,large
    python examples/train.py -m hydra/launcher=seml_local optimizer.lr=0.1,0.01 model=small,large
"""

import logging

import hydra
import numpy as np
from omegaconf import DictConfig

log = logging.getLogger(__name__)


def make_data(cfg: DictConfig, rng: np.random.Generator):
    """Binary labels from a linear score plus an XOR-like interaction term."""
    n, d = cfg.n_samples, cfg.n_features
    X = rng.standard_normal((n, d))
    score = X @ rng.standard_normal(d) + 2.0 * X[:, 0] * X[:, 1]
    y = (score + cfg.noise * rng.standard_normal(n) > 0).astype(float)
    n_val = int(n * cfg.val_fraction)
    return (X[n_val:], y[n_val:]), (X[:n_val], y[:n_val])


def init_params(d: int, hidden: int, rng: np.random.Generator) -> dict:
    if hidden == 0:  # logistic regression
        return {"w": np.zeros(d), "b": np.zeros(1)}
    return {
        "W1": rng.standard_normal((d, hidden)) / np.sqrt(d),
        "b1": np.zeros(hidden),
        "w": rng.standard_normal(hidden) / np.sqrt(hidden),
        "b": np.zeros(1),
    }


def forward(p: dict, X: np.ndarray):
    h = np.tanh(X @ p["W1"] + p["b1"]) if "W1" in p else X
    return h @ p["w"] + p["b"], h


def loss_and_grads(p: dict, X: np.ndarray, y: np.ndarray, l2: float):
    logits, h = forward(p, X)
    loss = np.mean(np.logaddexp(0.0, logits) - y * logits)  # binary cross-entropy
    loss += 0.5 * l2 * sum(np.sum(v**2) for k, v in p.items() if k.startswith(("w", "W")))
    dz = (1.0 / (1.0 + np.exp(-logits)) - y) / len(y)
    g = {"w": h.T @ dz + l2 * p["w"], "b": np.array([dz.sum()])}
    if "W1" in p:
        dh = np.outer(dz, p["w"]) * (1.0 - h**2)
        g["W1"] = X.T @ dh + l2 * p["W1"]
        g["b1"] = dh.sum(axis=0)
    return loss, g


def make_optimizer(cfg: DictConfig, params: dict):
    """Return ``step(params, grads)`` that updates ``params`` in place."""
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(val) for k, val in params.items()}
    t = [0]

    def step(p: dict, g: dict) -> None:
        t[0] += 1
        for k in p:
            if cfg.name == "sgd":
                m[k] = cfg.momentum * m[k] + g[k]
                p[k] -= cfg.lr * m[k]
            else:  # adam
                b1, b2 = cfg.betas
                m[k] = b1 * m[k] + (1 - b1) * g[k]
                v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
                m_hat, v_hat = m[k] / (1 - b1 ** t[0]), v[k] / (1 - b2 ** t[0])
                p[k] -= cfg.lr * m_hat / (np.sqrt(v_hat) + cfg.eps)

    return step


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    rng = np.random.default_rng(cfg.seed)
    (X_tr, y_tr), (X_val, y_val) = make_data(cfg.data, rng)
    params = init_params(X_tr.shape[1], cfg.model.hidden, rng)
    step = make_optimizer(cfg.optimizer, params)
    for epoch in range(1, cfg.epochs + 1):
        loss, grads = loss_and_grads(params, X_tr, y_tr, cfg.model.l2)
        step(params, grads)
        if epoch == 1 or epoch % 10 == 0:
            log.info("epoch %3d  train loss %.4f", epoch, loss)
    val_acc = float(np.mean((forward(params, X_val)[0] > 0) == y_val))
    print(
        f"model={cfg.model.name} optimizer={cfg.optimizer.name} lr={cfg.optimizer.lr} val_acc={val_acc:.4f}"
    )
    return val_acc


if __name__ == "__main__":
    main()
