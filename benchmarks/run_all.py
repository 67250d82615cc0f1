"""`make bench`: every benchmark in sequence; each writes its table to benchmarks/results/."""

import subprocess
import sys

BENCHMARKS = ["bench_scoring", "bench_job", "bench_meta", "bench_splits", "bench_codi", "bench_baselines", "bench_decoder_padding", "bench_prompted_lm", "bench_bertscore_memory"]


def main() -> int:
    failed = []
    for name in BENCHMARKS:
        print(f"== benchmarks.{name}", flush=True)
        if subprocess.call([sys.executable, "-m", f"benchmarks.{name}"]) != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
