"""BLEU and chrF baselines through sacreBLEU, per row over the row's ragged `references`.

Each row stores sacreBLEU's own sufficient statistics beside its sentence score (internal
float columns `_bleu_stat_<k>` / `_chrf_stat_<k>`), so the corpus-level score of any set of
rows (a system, a dataset) is computed later from the stored statistics without re-scoring
(`meta_eval/corpus_bleu.py`), exactly as sacreBLEU's `corpus_score` sums segment statistics:

* BLEU (Papineni et al. 2002): statistics = (hypothesis length, closest reference length,
  matched and total n-gram counts for n = 1..4); sentence BLEU with sacreBLEU's defaults
  (13a tokenisation, `exp` smoothing, effective order), corpus BLEU = BP * exp(mean_n log p_n).
* chrF (Popović 2015): statistics = per character (and word, for chrF++) n-gram order the
  hypothesis count, reference count and matches of the best-matching reference; the score is
  the F-beta of the averaged n-gram precision and recall.

The signature carries sacreBLEU's own signature (`nrefs:var`: references vary per row).
"""

from __future__ import annotations

from typing import Any, Sequence

from scoring.errors import UsageError
from scoring.metric import RowMetric
from scoring.signature import Signature

VERSION = "1"


class _SacreMetric(RowMetric):
    """A sacreBLEU sentence metric over `references`, with its statistics stored per row."""

    required_columns = ("text", "references")
    score_column = ""
    stat_prefix = ""

    def _build(self, **kwargs):
        raise NotImplementedError

    def _setup(self, **kwargs) -> None:
        try:
            self.scorer = self._build(**kwargs)
        except (TypeError, ValueError, KeyError) as exc:
            raise UsageError(f"{self.name}: {exc}") from exc
        self.kwargs = kwargs
        n_stats = len(self.scorer._extract_corpus_statistics(["a"], [["a"]])[0])
        self.stat_columns = tuple(f"{self.stat_prefix}{k}" for k in range(n_stats))
        self.output_columns = (self.score_column, *self.stat_columns)

    def sacrebleu_signature(self) -> str:
        """sacreBLEU's signature of this configuration (`nrefs:var`)."""
        probe = self._build(**self.kwargs)
        probe.num_refs = -1
        return probe.get_signature().format()

    def signature(self) -> Signature:
        return Signature(self.name, VERSION, {"sacrebleu": self.sacrebleu_signature(), **self.kwargs})

    def validate(self, row: dict[str, Any]) -> str | None:
        reason = super().validate(row)
        if reason is None and any(not isinstance(r, str) for r in row["references"]):
            return "null reference in 'references'"
        return reason

    def statistics(self, text: str, references: Sequence[str]) -> list[float]:
        """sacreBLEU's segment statistics of one hypothesis against its references."""
        return [float(v) for v in self.scorer._extract_corpus_statistics([text], [[r] for r in references])[0]]

    def score_from_statistics(self, stats: Sequence[float]) -> float:
        """The score of summed statistics (one row's, or a corpus's)."""
        return float(self.scorer._compute_score_from_stats([int(round(v)) for v in stats]).score)

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        results = []
        for row in rows:
            stats = self.statistics(row["text"], list(row["references"]))
            result = {self.score_column: self.score_from_statistics(stats)}
            result.update(zip(self.stat_columns, stats))
            results.append(result)
        return results


class BLEUMetric(_SacreMetric):
    """Sentence BLEU (sacreBLEU) of `text` against `references`: column `bleu`, plus the
    statistics that give corpus BLEU per system in the reports."""

    name = "bleu"
    score_column = "bleu"
    stat_prefix = "_bleu_stat_"

    def __init__(self, tokenize: str = "13a", lowercase: bool = False, smooth_method: str = "exp",
                 smooth_value: float | None = None, max_ngram_order: int = 4, effective_order: bool = True):
        self._setup(tokenize=tokenize, lowercase=lowercase, smooth_method=smooth_method, smooth_value=smooth_value,
                    max_ngram_order=max_ngram_order, effective_order=effective_order)

    def _build(self, **kwargs):
        from sacrebleu.metrics import BLEU

        return BLEU(**kwargs)

    def corpus_scorer(self):
        """The sacreBLEU object for corpus BLEU of stored statistics (no effective order, as
        sacreBLEU's `corpus_bleu`)."""
        return self._build(**{**self.kwargs, "effective_order": False})


class CHRFMetric(_SacreMetric):
    """Sentence chrF (sacreBLEU; chrF++ with `word_order: 2`) of `text` against `references`:
    column `chrf`, plus the statistics that give corpus chrF per system in the reports."""

    name = "chrf"
    score_column = "chrf"
    stat_prefix = "_chrf_stat_"

    def __init__(self, char_order: int = 6, word_order: int = 0, beta: int = 2, lowercase: bool = False,
                 whitespace: bool = False, eps_smoothing: bool = False):
        self._setup(char_order=char_order, word_order=word_order, beta=beta, lowercase=lowercase,
                    whitespace=whitespace, eps_smoothing=eps_smoothing)

    def _build(self, **kwargs):
        from sacrebleu.metrics import CHRF

        return CHRF(**kwargs)

    def corpus_scorer(self):
        return self.scorer
