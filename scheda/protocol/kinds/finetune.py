"""Phase 5: supervised fine-tuning of the best DA's and the best ScheDA's encoder of each
hidden size (the paper's Table 3 has both; 36.77 -> 35.7 % for the 5000-unit ScheDA). A
fine-tuning job reports its own chosen learning rate and epoch, not an evaluation of ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from scheda.protocol.jobs import JobSpec, fmt, pct
from scheda.protocol.kinds.base import FINETUNE, JobKind, register_kind


class FinetuneKind(JobKind):
    role = FINETUNE
    of: ClassVar[str]  # the kind whose best run it fine-tunes ("da": the best DA)
    short: ClassVar[str]  # its name in the seeds' comparisons
    compared_with: ClassVar[str | None] = None  # the fine-tuned kind the seeds' report tests it against
    question: ClassVar[str] = ("does the difference between the two encoders survive supervised fine-tuning (each "
                               "seed's own model, its learning rate and epoch chosen on validation)")
    paper: ClassVar[str]

    @property
    def paper_row(self) -> str:
        return self.paper

    def job(self, preset: str, hidden: int, best: dict[str, Any]) -> JobSpec:
        return JobSpec(f"{self.name}_h{hidden}", "finetune", groups={"finetune": preset},
                       values={"model.hidden": hidden, "finetune.enabled": True, "finetune.standalone": True,
                               "init_from": best["checkpoint"]},
                       meta={"kind": self.name, "hidden": hidden, "from": best["run"]})

    def select(self, run_dir: Path, results: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any] | None:
        chosen = results.get("finetune", {}).get("chosen")
        if not chosen:
            return None
        return {"run": str(run_dir), "from": meta["from"], **chosen, "frozen": results["finetune"].get("frozen")}

    def file(self, found: dict[str, Any], entry: dict[str, Any], meta: dict[str, Any]) -> None:
        found.setdefault(str(meta["hidden"]), {})[self.name] = entry  # one chosen result: nothing to choose among

    def describe(self, ft: dict[str, Any]) -> str:
        frozen = f" (frozen features: {pct(ft['frozen']['test_error'])} % test)" if ft.get("frozen") else ""
        return f"lr={fmt(ft['lr'])}, epoch {ft['best_epoch']}{frozen}"


@register_kind
class FinetuneDA(FinetuneKind):
    name, label, short, of, paper = "finetune_da", "Fine-tuned best DA", "Fine-tuned DA", "da", "finetuned_da"


@register_kind
class FinetuneScheDA(FinetuneKind):
    name, label, short, of, paper = "finetune_scheda", "Fine-tuned best ScheDA", "Fine-tuned ScheDA", "scheda", "finetuned"
    compared_with = "finetune_da"
