import math
from dataclasses import dataclass
import coinfer.decoding.draft_length as dl
from coinfer.decoding.draft_length import AdaptiveDraftLength, CopyBucket

def shaped(knee, power):
    def prior(match, position, miss=1.0):
        L = max(1, match + position - 1)
        return max(0.0, 1.0 - miss / (L * (1 + (L / knee) ** power)))
    return prior

@dataclass
class QPolicy(AdaptiveDraftLength):
    q_strength: float = 1.0   # expected misses the neutral ratio (1) is worth
    q_memory: float = 0.95
    q_floor: float = 0.25
    prior_fn: object = None
    _obs: float = 0.0
    _exp: float = 0.0

    def _prior(self, match, j):
        f = self.prior_fn or dl.copy_prior
        return f(match, j, self.copy_miss)

    q_caution: float = 0.0

    def ratio(self):
        a = self.q_strength
        mean = (self._obs + a) / (self._exp + a)
        sd = math.sqrt(self._obs + a) / (self._exp + a)
        return max(self.q_floor, mean + self.q_caution * sd)

    def learn(self, *, bucket, position, kept):
        super().learn(bucket=bucket, position=position, kept=kept)
        if isinstance(bucket, CopyBucket):
            if position == 1:
                self._obs *= self.q_memory; self._exp *= self.q_memory
            self._obs += not kept
            self._exp += 1 - self._prior(bucket.match, position)

    def _copy_continuation(self, match, record):
        q = self.ratio()
        out = [1.0]
        for j in range(1, self.k_max + 1):
            agreed = match + j - 1
            strength = min(self.copy_strength, agreed)
            prior = max(0.0, 1 - q * (1 - self._prior(match, j)))
            t, p = (record.tries[j], record.passes[j]) if record else (0.0, 0.0)
            c = (p + strength * prior) / (t + strength)
            n = t + min(self.copy_confidence, agreed)
            out.append(max(0.0, c - self.caution * math.sqrt(c * (1 - c) / n)))
        return out
