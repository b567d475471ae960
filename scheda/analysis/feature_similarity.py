"""Table 2 of the paper: for each hidden unit of a reference model (a ScheDA), which DA(nu)
holds its most similar unit (activation vectors over the training split; cosine as the paper,
or ``--measure correlation``); C_nu counts them, and a unit whose best two DAs tie is counted as
tied (:data:`scheda.analysis.similarity.TIE`). ``--baseline`` repeats the count for another
model (e.g. DA*(nu), a DA of another seed).

    scheda-feature-similarity --reference RUN_SCHEDA --baseline RUN_DA_STAR \\
        --da 0.1=RUN_A 0.3=RUN_B 0.5=RUN_C 0.7=RUN_D --out table2.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


from scheda.analysis.core import run_label
from scheda.analysis.similarity import MEASURES, closest, compare_all
from scheda.data import load_dataset
from scheda.utils.errors import SchedaError
from scheda.utils.io import atomic_write, print_line
from scheda.training.checkpoint import load_run_model
from scheda.utils.interrupt import one_line_on_ctrl_c, quiet_on_a_closed_pipe


@quiet_on_a_closed_pipe
@one_line_on_ctrl_c
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True, help="the model whose features are counted (a ScheDA run)")
    parser.add_argument("--baseline", default=None, help="a second reference, e.g. DA*(nu) of another seed")
    parser.add_argument("--da", nargs="+", required=True, metavar="NU=RUN", help="the DA(nu) runs compared with")
    parser.add_argument("--data-root", default=None, help="override the runs' dataset.root")
    parser.add_argument("--split", default="train", choices=["train", "val", "test"],
                        help="the inputs whose activations are compared (the paper: train)")
    parser.add_argument("--measure", default="cosine", choices=MEASURES,
                        help="cosine of raw activations (the paper's) or their correlation (centred)")
    parser.add_argument("--device", default="cpu", help="where to encode and compare (cuda, cuda:1)")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    args = parser.parse_args(argv)
    try:
        start = time.perf_counter()
        cfg, reference, _ = load_run_model(args.reference, args.device)
        if args.data_root:
            cfg.dataset.root = args.data_root
        x = load_dataset(cfg.dataset).tensor(args.split, args.device)

        def acts(model):
            return model.encode_dataset(x)

        das = {}
        for item in args.da:
            nu, sep, path = item.partition("=")
            if not sep:
                parser.error(f"--da takes NU=RUN, got {item!r}")
            das[nu] = acts(load_run_model(path, args.device)[1])
        refs = {run_label(args.reference): acts(reference)}
        if args.baseline:
            refs[run_label(args.baseline) + "*"] = acts(load_run_model(args.baseline, args.device)[1])
        pairs = compare_all(refs, das)  # each model's moments once
        counts = {name: closest({nu: pairs[(name, nu)].best[args.measure] for nu in das}) for name in refs}
    except SchedaError as exc:
        print_line(f"error: {exc}")
        return 1
    lines = ["| nu | " + " | ".join(f"C_nu for {name}" for name in counts) + " |",
             "|---|" + "---|" * len(counts)]
    lines += [f"| {nu} | " + " | ".join(str(c.counts[nu]) for c in counts.values()) + " |" for nu in das]
    lines.append("| tied | " + " | ".join(str(c.tied) for c in counts.values()) + " |")
    table = "\n".join(lines)
    print(table)
    print(f"\n{x.shape[0]} data points ({args.split}); {time.perf_counter() - start:.1f}s")
    if args.out:
        atomic_write(args.out, lambda f: f.write((table + "\n").encode()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
