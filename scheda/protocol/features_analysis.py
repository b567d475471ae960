"""The features table's analysis (scheda.protocol.tables.features): what it computes from the
trained models' reported checkpoints, kept in ``<out_dir>/feature_analysis/`` one file per piece
(a seed's similarities on one split, an initialisation pair's concatenations, written after every
cell; the reconstruction errors). Each file names the checkpoints it was computed from: a model
trained further, or trained again, is analysed again; a piece already done is read.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scheda.analysis.core import clean_reconstruction_error
from scheda.analysis.similarity import MEASURES, TIE, closest, compare_all
from scheda.protocol.jobs import fmt
from scheda.utils.io import atomic_write_json
from scheda.utils.lazy import lazy

torch = lazy("torch", globals())

log = logging.getLogger(__name__)

SPLITS = ("train", "val")  # Table 2 over the training split (the paper's) and again over validation
REFERENCES = ("scheda", "jump", "same_start", "da_star_low", "da_star_high")  # Table 2's rows
CONTINUATIONS = ("scheda", "jump", "same_start")  # the rows that start from one of the candidates


def checkpoint_of(e: dict[str, Any] | None) -> str | None:
    return e.get("checkpoint") if e else None


class Analysis:
    """The pieces of one features table: ``run`` computes those missing, ``load`` reads them all."""

    def __init__(self, cfg: DictConfig, out_dir: Path, settings, models: dict[str, Any], continued: dict[str, Any]):
        self.cfg, self.out_dir, self.s = cfg, out_dir, settings
        self.models, self.continued = models, continued
        self.folder = out_dir / "feature_analysis"
        self._data: dict[str, Any] = {}
        self._inputs: dict[tuple[str, str], Any] = {}
        self._device = None

    # --- what each piece needs ---------------------------------------------------------------
    def _rel(self, path: str) -> str:
        """A checkpoint named inside out_dir (the folder may move: the key stays)."""
        try:
            return str(Path(path).resolve().relative_to(self.out_dir.resolve()))
        except ValueError:
            return str(path)

    def similarity_models(self, seed: int) -> dict[str, str] | None:
        """The checkpoints one reference seed's Table 2 reads: its continuations, its DA(min nu) and
        DA(max nu) (DA*: of another initialisation than the candidates, as the paper's), the candidates
        (the DAs of the seed it is compared with: another initialisation) and its own DAs for the
        ceiling; None until every one is there."""
        s = self.s
        own, other = self.models.get(str(seed), {}), self.models.get(str(s.candidates_of(seed)), {})
        cont = self.continued.get(str(seed), {})
        wanted = {f"da{fmt(nu)}": checkpoint_of(other.get("da", {}).get(fmt(nu))) for nu in s.nus}
        wanted.update({name: checkpoint_of(cont.get(name)) for name in ("scheda", "jump", "same_start")})
        wanted["da_star_low"] = checkpoint_of(own.get("da", {}).get(fmt(s.nu_final)))
        wanted["da_star_high"] = checkpoint_of(own.get("da", {}).get(fmt(s.nu0)))
        wanted.update({f"own{fmt(nu)}": checkpoint_of(own.get("da", {}).get(fmt(nu))) for nu in s.da_levels(seed)})
        return None if None in wanted.values() else wanted

    def concat_models(self, a: int, b: int) -> dict[str, str] | None:
        """The DAs Figure 6's cells of the pair (a, b) read; None until every one is there."""
        wanted = {}
        for lo, hi, x, y in self.s.concat_cells(a, b):
            for seed, nu in ((x, lo), (y, hi)):
                wanted[f"{seed}:{fmt(nu)}"] = checkpoint_of(self.models.get(str(seed), {}).get("da", {}).get(fmt(nu)))
        return None if not wanted or None in wanted.values() else wanted

    # --- loading models and data --------------------------------------------------------------
    def device(self):
        if self._device is None:
            self._device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return self._device

    def load_model(self, checkpoint: str):
        from scheda.training.checkpoint import load_run_model

        cfg, model, _ = load_run_model(checkpoint, self.device())
        model.eval()
        return cfg, model

    def data(self, run_cfg: DictConfig):
        """The runs' data set (every model of the table trains on the same), loaded once."""
        from scheda.data import load_dataset

        key = OmegaConf.to_yaml(run_cfg.dataset)
        if key not in self._data:
            self._data[key] = load_dataset(run_cfg.dataset)
        return self._data[key]

    def inputs(self, run_cfg: DictConfig, split: str):
        """One split's inputs on the device, made once for every model that reads them (a float
        copy of CIFAR-10's training split is 550 MB)."""
        key = (OmegaConf.to_yaml(run_cfg.dataset), split)
        if key not in self._inputs:
            self._inputs[key] = self.data(run_cfg).tensor(split, self.device())
        return self._inputs[key]

    def encode(self, checkpoint: str, splits=SPLITS) -> dict[str, Any]:
        cfg, model = self.load_model(checkpoint)
        with torch.no_grad():
            return {split: model.encode_dataset(self.inputs(cfg, split)) for split in splits}

    # --- the pieces ---------------------------------------------------------------------------
    def _similarity_key(self, wanted: dict[str, str]) -> dict[str, Any]:
        """The checkpoints a seed's Table 2 is computed from, and the rule that counts its ties: a
        piece counted by another rule is counted again."""
        return {**{name: self._rel(path) for name, path in wanted.items()}, "tie": TIE, "candidates": "other initialisation"}

    def _read(self, path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
        """A piece computed from the same checkpoints, or None."""
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return saved if saved.get("key") == key else None

    def run(self) -> None:
        """Every piece whose models are there and that is not done yet."""
        started = time.perf_counter()
        for seed in self.s.references:
            wanted = self.similarity_models(seed)
            if wanted is not None:
                self.similarity(seed, wanted)
        for a, b in self.s.pairs:
            wanted = self.concat_models(a, b)
            if wanted is not None:
                self.concatenations(a, b, wanted)
        self.reconstruction()
        log.info("feature analysis: %.1f s", time.perf_counter() - started)

    def similarity(self, seed: int, wanted: dict[str, str]) -> None:
        """Table 2 of one reference seed on each split: every reference against every candidate DA
        (another initialisation's), plus the reference's own DA(max nu) as the candidate in place of
        the other's (a continuation starts from it), and the CKA of the seed's DA(nu) against the
        candidate DA(nu) at every nu both have (the ceiling: the same setting, another initialisation)."""
        key = self._similarity_key(wanted)
        todo = [split for split in SPLITS if self._read(self.folder / f"similarity_{split}_seed{seed}.json", key) is None]
        if not todo:
            return
        t = time.perf_counter()
        by_path: dict[str, dict[str, Any]] = {}  # DA*(max nu) is also the own start: encoded once
        for path in wanted.values():
            if path not in by_path:
                by_path[path] = self.encode(path, todo)
        acts = {name: by_path[path] for name, path in wanted.items()}
        own_levels = self.s.da_levels(seed)
        for split in todo:
            x = {name: a[split] for name, a in acts.items()}
            candidates = [f"da{fmt(nu)}" for nu in self.s.nus]
            start = f"own{fmt(self.s.nu0)}"
            ceiling_pairs = {f"own{fmt(nu)}": f"da{fmt(nu)}" for nu in own_levels}
            known: dict = {}  # each model's moments, once
            every = compare_all({r: x[r] for r in REFERENCES}, {c: x[c] for c in [*candidates, start]}, known=known)
            every.update(compare_all({a: x[a] for a in ceiling_pairs}, {b: x[b] for b in ceiling_pairs.values()},
                                     known=known, only=set(ceiling_pairs.items())))
            refs: dict[str, Any] = {}
            for ref in REFERENCES:
                pairs = {c: every[(ref, c)] for c in [*candidates, start]}
                sets = {"other": candidates}
                if ref in CONTINUATIONS:  # the other's DA(max nu) replaced by the continuation's own start
                    sets["own_start"] = [start if c == f"da{fmt(self.s.nu0)}" else c for c in candidates]
                out: dict[str, Any] = {"cka": {c: pairs[c].cka for c in candidates}}
                out["cka_own_start"] = pairs[start].cka
                for name, chosen in sets.items():
                    out[name] = {}
                    for measure in MEASURES:
                        # the count's labels are the candidates' nu (the own start counts as DA(max nu))
                        c = closest({fmt(self.s.nus[i]): pairs[chosen[i]].best[measure] for i in range(len(chosen))})
                        out[name][measure] = {"counts": c.counts, "tied": c.tied, "mean_best": c.mean_best,
                                              "median_margin": c.median_margin, "share_high": c.share(self.s.high)}
                refs[ref] = out
            ceiling = {fmt(nu): every[(f"own{fmt(nu)}", f"da{fmt(nu)}")].cka for nu in own_levels}
            atomic_write_json(self.folder / f"similarity_{split}_seed{seed}.json",
                              {"key": key, "seed": seed, "candidates": self.s.candidates_of(seed), "split": split,
                               "n": int(next(iter(x.values())).shape[0]), "refs": refs, "ceiling": ceiling,
                               "seconds": time.perf_counter() - t})
            log.info("feature analysis: seed %d's similarities on %s (%.1f s)", seed, split, time.perf_counter() - t)

    def concatenations(self, a: int, b: int, wanted: dict[str, str]) -> None:
        """Figure 6 for one initialisation pair: a DA of one seed beside a DA of the other, each
        unordered pair of levels its DAs allow once (``Settings.concat_cells``), evaluated as any
        representation (the runs' own classifier and C grid), the file written after every cell."""
        from scheda.evaluation.evaluate import evaluate_features, labels_of

        key = {name: self._rel(path) for name, path in wanted.items()}
        path = self.folder / f"concat_{a}_{b}.json"
        saved = self._read(path, key) or {"key": key, "pair": [a, b], "cells": []}
        done = {(c["low"], c["high"]) for c in saved["cells"]}
        todo = [cell for cell in self.s.concat_cells(a, b) if (fmt(cell[0]), fmt(cell[1])) not in done]
        if not todo:
            return
        run_cfg, _ = self.load_model(next(iter(wanted.values())))
        data = self.data(run_cfg)
        features: dict[str, dict[str, Any]] = {}

        def feats(name: str) -> dict[str, Any]:
            if name not in features:
                features[name] = self.encode(wanted[name], ("train", "val", "test"))
            return features[name]

        for lo, hi, x, y in todo:
            t = time.perf_counter()
            parts = [feats(f"{x}:{fmt(lo)}"), feats(f"{y}:{fmt(hi)}")]
            joined = {split: torch.cat([part[split] for part in parts], dim=1) for split in ("train", "val", "test")}
            result = evaluate_features(joined, labels_of(data), run_cfg.classifier, self.device())
            saved["cells"].append({"low": fmt(lo), "high": fmt(hi), "seeds": [x, y], "val_error": result["val_error"],
                                   "test_error": result["test_error"], "params": result["params"],
                                   "at_edge": result["at_edge"], "seconds": time.perf_counter() - t})
            atomic_write_json(path, saved)
            log.info("feature analysis: DA(%s) of seed %d + DA(%s) of seed %d: test %.2f %% (%.1f s)", fmt(lo), x,
                     fmt(hi), y, 100 * result["test_error"], time.perf_counter() - t)

    def reconstruction(self) -> None:
        """Every reported model's reconstruction error of the clean training split (no noise: the
        same input for every model, whatever nu it trained at), mean per image, summed over inputs."""
        path = self.folder / "reconstruction.json"
        models = {f"{seed}:{name}": e["checkpoint"] for seed, place in self._all_entries() for name, e in place.items()
                  if e and e.get("checkpoint")}
        key = {name: self._rel(p) for name, p in models.items()}
        saved = json.loads(path.read_text()) if path.exists() else {"models": {}}
        kept = {name: v for name, v in saved.get("models", {}).items() if v.get("checkpoint") == key.get(name)}
        todo = [name for name in models if name not in kept]
        for name in todo:
            cfg, model = self.load_model(models[name])
            kept[name] = {"checkpoint": key[name], "clean_train": clean_reconstruction_error(model, self.inputs(cfg, "train"))}
            atomic_write_json(path, {"models": kept})

    def _all_entries(self):
        for seed in self.s.seeds:
            own, cont = self.models.get(str(seed), {}), self.continued.get(str(seed), {})
            place = {f"da{nu}": e for nu, e in own.get("da", {}).items()}
            place.update({f"composite_{u}": e for u, e in own.get("composite", {}).items()})
            place.update({"da2": own.get("da2"), **cont})
            yield seed, place

    # --- reading ------------------------------------------------------------------------------
    def load(self) -> dict[str, Any]:
        """Every piece computed from the checkpoints the table reports now."""
        out: dict[str, Any] = {"similarity": {split: {} for split in SPLITS}, "concat": {}, "reconstruction": {}}
        for seed in self.s.references:
            wanted = self.similarity_models(seed)
            if wanted is None:
                continue
            key = self._similarity_key(wanted)
            for split in SPLITS:
                found = self._read(self.folder / f"similarity_{split}_seed{seed}.json", key)
                if found is not None:
                    out["similarity"][split][str(seed)] = found
        for a, b in self.s.pairs:
            wanted = self.concat_models(a, b)
            if wanted is not None:
                found = self._read(self.folder / f"concat_{a}_{b}.json",
                                   {name: self._rel(path) for name, path in wanted.items()})
                if found is not None:
                    out["concat"][f"{a}_{b}"] = found
        path = self.folder / "reconstruction.json"
        if path.exists():
            saved = json.loads(path.read_text()).get("models", {})
            for seed, place in self._all_entries():
                for name, e in place.items():
                    got = saved.get(f"{seed}:{name}")
                    if e and got and got["checkpoint"] == self._rel(e.get("checkpoint") or ""):
                        out["reconstruction"][f"{seed}:{name}"] = got["clean_train"]
        return out
