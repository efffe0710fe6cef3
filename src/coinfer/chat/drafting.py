"""``LocalChat``'s drafting step: the running jobs' drafts verified in the batch's one step.

Every job that speculates (no grammar to follow; greedy or sampling) brings its drafter's
proposal after its next token; the proposals are cut together (``BatchSpeculator``), the
step runs them in one forward, and each job keeps what the target agrees with:

* a greedy job, the longest prefix of its draft equal to the target's choices there;
* a job that samples, the prefix its own samples of the target's distributions agree
  with (``verify.sampled_choices``), each position sampled with its own uniform
  (``PositionDraws``, as plain sampling and every engine draw them): its text is the one
  plain sampling draws from the same seed (the README's known gap aside: another batch
  shape moves llama.cpp's logits slightly), and a draft token is kept with the target's
  probability of it, so the output keeps the target's distribution.

Jobs that do not speculate share the step with one token each. Only rows that sample move
a vocabulary of logits off the model; greedy rows come back as choices.
"""

from __future__ import annotations

import time

import numpy as np

from coinfer.chat.job import Job, seq_of
from coinfer.decoding.batch_shape import Passes
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.verify import sampled_choices
from coinfer.models.base import Seq, SteerableModel

__all__ = ["DraftingSteps"]


class DraftingSteps:
    """The drafting step of a chat over a steerable ``model`` (a mixin of ``LocalChat``)."""

    model: SteerableModel

    def _took(self, job: Job, token: int) -> bool:
        """Output ``token`` for ``job``; False when that ends it (the chat's own)."""
        raise NotImplementedError

    def _speculate(self, feed: list[tuple[Job, list[int]]], speculator: BatchSpeculator) -> tuple[int, int]:
        """One step over every job's next token, the drafting ones' drafts after it; each
        drafting job keeps what the target agrees with (rolled back past it). Where the
        step is evened (``StepDrafts.width``), a job's rows past its draft are filler,
        verified for nothing and rolled back. Returns the tokens the step gave and the
        draft tokens it verified."""
        drafting = [j for j, _ in feed if j.speculate]
        contexts = {j.key: j.prompt + j.tokens for j in drafting}
        rows = [(j.key, contexts[j.key], self._room(j)) for j in drafting]
        seqs = [seq_of(j) for j in drafting] + [seq_of(j) for j, _ in feed if not j.speculate]
        step = speculator.drafts(rows, len(feed) - len(rows), self._passes(seqs))
        drafts = dict(zip((j.key for j in drafting), step.drafts, strict=True))
        items = [(seq_of(j), self._filled(j, ids + drafts.get(j.key, []), step.width)) for j, ids in feed]
        t0 = time.perf_counter()
        out = self.model.extend_many_rows(items, [not j.greedy for j, _ in feed])
        speculator.measured(
            sum(len(fed) for _, fed in items),
            time.perf_counter() - t0,
            draft_s=step.seconds,
            proposed=step.proposed,
            passes=self.model.pass_rows([(seq, len(fed)) for seq, fed in items]),
        )
        produced = 0
        for (job, ids), (_, fed), rows_out in zip(feed, items, out, strict=True):
            produced += 1
            draft = drafts.get(job.key, [])
            filler = len(fed) - len(ids) - len(draft)
            if not job.speculate:
                self._one_token(job, rows_out[len(ids) - 1], filler)
                continue
            choices = self._choices(job, draft, rows_out[len(ids) - 1 :])
            kept = speculator.accepted(job.key, contexts[job.key], draft, choices)
            self._keep_draft(job, draft, kept, filler)
            produced += len(kept) - 1
        return produced, sum(len(d) for d in step.drafts)

    def _one_token(self, job: Job, row: np.ndarray, filler: int) -> None:
        """A job that did not draft: its next token's choice (greedy) or logits (sampled or
        under a grammar, drawn by the chat as in a plain step), its filler rolled back."""
        if job.greedy:
            job.choice = int(row)
        else:
            job.logits = row
        if filler:
            self.model.truncate(seq_of(job), len(seq_of(job)) - filler)

    @staticmethod
    def _choices(job: Job, draft: list[int], rows: np.ndarray) -> list[int]:
        """The target's tokens along ``draft`` (its greedy choices, or the job's samples as
        far as they agree with the draft): what ``BatchSpeculator.accepted`` keeps from."""
        if job.greedy:
            return rows.tolist()
        return sampled_choices(draft, rows, job.params, job.draws, job.position)

    def _passes(self, seqs: list[Seq]) -> Passes:
        """How the model runs a step in which each of ``seqs`` brings some rows."""
        return lambda rows: self.model.pass_rows(list(zip(seqs, rows, strict=True)))

    def _filled(self, job: Job, fed: list[int], width: int | None) -> list[int]:
        """``fed`` filled up to ``width`` rows (repeating its last token), as far as the
        job's window allows: the target's choices there are not used, the cache is rolled
        back past them."""
        if width is None:
            return fed
        room = self.model.n_ctx - len(seq_of(job)) - 1 - len(fed)
        return fed + [fed[-1]] * max(0, min(width - len(fed), room))

    def _room(self, job: Job) -> int:
        """Draft tokens ``job`` may verify: within its budget and its window, its next
        token fed first."""
        return max(0, min(job.max_tokens - len(job.tokens) - 1, self.model.n_ctx - len(seq_of(job)) - 2))

    def _keep_draft(self, job: Job, draft: list[int], kept: list[int], filler: int = 0) -> None:
        """Roll the cache back past the rejected draft (and the ``filler`` rows after it),
        output the agreed draft tokens (an end token or the budget ends the job), and make
        the target's own token next."""
        agreed = len(kept) - 1
        job.drafted += len(draft)
        job.accepted += agreed
        job.verified += 1
        if agreed < len(draft) + filler:
            self.model.truncate(seq_of(job), len(seq_of(job)) - (len(draft) - agreed + filler))
        for token in kept[:-1]:
            if not self._took(job, token):
                return
        job.choice = kept[-1]
