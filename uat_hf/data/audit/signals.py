"""Per-pair signals of a broken parallel corpus, the ones the MT field checks before training.

Each signal says, for every pair, whether it fails a check that a sound translation pair passes (OpusFilter's
families: language ID, character script, copies, duplicates, length ratio, length, word alignment, n-gram LM
cross-entropy). None of
them is a verdict on its own: a dictionary has short pairs, software strings copy names and placeholders. The audit
(:mod:`.corpus_audit`) compares each corpus's failing share with its own trusted dev set's, so that only what
sets the training pairs apart from the dev pairs counts.

The two model-based signals (lexical adequacy, target fluency) are fitted on one half of every corpus's sample
and score the other half and the dev sets, so that no pair is scored by a model that saw it: a memorised pair
would otherwise look adequate.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np
import xxhash

_WORD = re.compile(r"\w+", re.UNICODE)
_NON_WORD = re.compile(r"\W+", re.UNICODE)
#: The ASCII characters that are not word characters (``\W``): an ASCII text loses them in one ``bytes.translate``.
_ASCII_NON_WORD = bytes(code for code in range(128) if not (chr(code).isalnum() or chr(code) == "_"))
#: Text shorter than this many letters gets no language verdict: identifiers are unreliable on a word or two.
MIN_LANGUAGE_LETTERS = 20
#: A side needs this many upper-case letters to count as written all in capitals (:func:`shouting`).
MIN_CASED_LETTERS = 4
#: An HTML/XML tag (``<p class="x">``, ``</b>``, ``<br/>``, a placeholder such as ``<prefix>``) and a character
#: entity (``&amp;``, ``&#228;``): the markup a crawl or an export leaves in a side (:func:`markup_mismatch`).
_TAG = re.compile(r"</?[^\W\d_][\w:.-]*(?:\s[^<>]*)?/?>")
_ENTITY = re.compile(r"&(?:#\d+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]{1,7});")
#: Jaccard overlap of the two sides' word sets at or above which a target counts as a (near-)copy of its source.
COPY_OVERLAP = 0.8
_FLOOR = 1e-7


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def normalised(text: str) -> str:
    """Lower case, letters and digits only (``"".join(words(text))``): the key under which near-duplicates collide.
    Every training pair is normalised for the repeat signal, so the common case, an ASCII text, takes the C path
    of ``bytes.translate``, about twice as fast as the regular expression."""
    if text.isascii():
        return text.encode().lower().translate(None, _ASCII_NON_WORD).decode()
    return _NON_WORD.sub("", text.lower())


def copied(sources: Sequence[str], targets: Sequence[str]) -> np.ndarray:
    """A target that repeats its source: the same letters and digits, or ≥ :data:`COPY_OVERLAP` of the words."""
    out = np.zeros(len(sources), dtype=bool)
    for k, (source, target) in enumerate(zip(sources, targets)):
        s, t = set(words(source)), set(words(target))
        if not t:
            continue
        out[k] = normalised(source) == normalised(target) or len(s & t) / len(s | t) >= COPY_OVERLAP
    return out


def pair_keys(sources: Sequence[str], targets: Sequence[str]) -> np.ndarray:
    """A 64-bit hash of each pair's normalised source and target (:func:`normalised`): equal for near-duplicates.
    Stable across processes and runs (xxh64, which ``datasets`` itself depends on, not Python's salted ``hash``),
    so that batches hashed in worker processes, or cached by ``datasets``, compare with each other."""
    keys = (xxhash.xxh64_intdigest(f"{normalised(source)}\0{normalised(target)}".encode())
            for source, target in zip(sources, targets))
    return np.fromiter(keys, dtype=np.uint64, count=len(sources)).view(np.int64)


def repeated_keys(keys: np.ndarray) -> np.ndarray:
    """Of pair keys in corpus order (:func:`pair_keys`), those that occurred earlier: every occurrence but the
    first."""
    out = np.ones(len(keys), dtype=bool)
    out[np.unique(keys, return_index=True)[1]] = False
    return out


def repeated(sources: Sequence[str], targets: Sequence[str]) -> np.ndarray:
    """A pair whose normalised source and target both occurred earlier in the corpus (the copies of a pair, not
    its first occurrence): what exact dedupe misses when only case, punctuation or spacing differ."""
    return repeated_keys(pair_keys(sources, targets))


@functools.cache
def _identifier():
    """py3langid's identifier over all its languages: our own, so that a caller's ``set_languages`` on the
    module's shared one cannot narrow it."""
    from py3langid.langid import _load_identifier

    return _load_identifier()


def base_language(code: str) -> str:
    """``pt_BR`` → ``pt``, ``zh-Hans`` → ``zh``, ``deu_Latn`` (NLLB) → ``deu``."""
    return re.split(r"[_-]", code)[0].lower()


def wrong_language(texts: Sequence[str], language: str) -> np.ndarray:
    """Text that py3langid (offline, its model ships in the wheel) identifies as another language than
    ``language``; text under :data:`MIN_LANGUAGE_LETTERS` letters never fails. All pass when py3langid does not
    know ``language``."""
    identifier = _identifier()
    code = base_language(language)
    out = np.zeros(len(texts), dtype=bool)
    if code not in identifier.nb_classes:
        return out
    for k, text in enumerate(texts):
        if sum(c.isalpha() for c in text) >= MIN_LANGUAGE_LETTERS:
            out[k] = identifier.classify(text)[0] != code
    return out


def unseen_characters(texts: Sequence[str], reference: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each text using a character that no reference text uses (another script, mojibake such as ``Ã¼`` for
    ``ü``, control or replacement characters; spaces aside), and each reference text using one that no *other*
    reference text uses. Leaving a reference text out of the inventory it is checked against gives it at least the
    chance of failing that a new text drawn like the references has, so a sound corpus fails no more often than
    its dev set (OpusFilter's character-script check, its alphabet read off the trusted set)."""
    counts = Counter(c for text in reference for c in set(text) if not c.isspace())
    return (np.array([any(c not in counts for c in set(text) if not c.isspace()) for text in texts], dtype=bool),
            np.array([any(counts[c] == 1 for c in set(text) if not c.isspace()) for text in reference], dtype=bool))


def swapped_sides(sources: Sequence[str], targets: Sequence[str], dev_sources: Sequence[str],
                  dev_targets: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each pair whose source reads more like the dev targets than the dev sources *and* whose target reads more
    like the dev sources than the dev targets, and each dev pair likewise, scored leave-one-out: a corpus with its
    two sides swapped. Language identification misses that on short strings (under :data:`MIN_LANGUAGE_LETTERS`
    letters) and on languages it does not know; a character trigram model of each dev side knows both languages
    of this corpus, on any text length. A copy cannot fail: one text cannot read like both sides at once."""
    side_counts = [Counter(g for text in side for g in _trigrams(text)) for side in (dev_sources, dev_targets)]
    totals = [sum(counts.values()) for counts in side_counts]
    vocabulary = len(side_counts[0].keys() | side_counts[1].keys()) + 1
    # log P(text | dev targets) − log P(text | dev sources), add-one smoothed, is a sum over the text's trigrams
    # of these differences (0 for a trigram neither side has) plus a constant per trigram.
    gram_gain = {g: math.log((side_counts[1][g] + 1) / (side_counts[0][g] + 1))
                 for g in side_counts[0].keys() | side_counts[1].keys()}
    per_gram = math.log((totals[0] + vocabulary) / (totals[1] + vocabulary))

    def leaning(text: str) -> float:
        grams = _trigrams(text)
        return sum(gram_gain.get(g, 0.0) for g in grams) + len(grams) * per_gram

    def left_out(source: str, target: str) -> tuple[float, float]:
        """:func:`leaning` of a dev pair's two sides by the models of the other dev pairs: the pair's trigrams
        taken out of the counts and, where no other pair has them, out of the vocabulary."""
        own = Counter(_trigrams(source)), Counter(_trigrams(target))
        counts = [{g: side_counts[k][g] - own[k][g] for g in own[0].keys() | own[1].keys()} for k in (0, 1)]
        unseen = sum(counts[0][g] == counts[1][g] == 0 for g in counts[0])
        per = math.log((totals[0] - own[0].total() + vocabulary - unseen)
                       / (totals[1] - own[1].total() + vocabulary - unseen))
        return tuple(sum(m * math.log((counts[1][g] + 1) / (counts[0][g] + 1)) for g, m in grams.items())
                     + grams.total() * per for grams in own)

    dev_leanings = [left_out(s, t) for s, t in zip(dev_sources, dev_targets)]
    return (np.array([leaning(s) > 0 > leaning(t) for s, t in zip(sources, targets)], dtype=bool),
            np.array([s > 0 > t for s, t in dev_leanings], dtype=bool))


def _trigrams(text: str) -> list[str]:
    padded = f" {' '.join(text.lower().split())} "
    return [padded[k:k + 3] for k in range(len(padded) - 2)]


def shouting(sources: Sequence[str], targets: Sequence[str]) -> np.ndarray:
    """A pair one side of which is written all in capitals (every letter upper case, at least
    :data:`MIN_CASED_LETTERS` of them) while the other has lower-case letters: a side upper-cased by a crawl or a
    converter, which a model learns to write. The lexical and fluency models read lower case and cannot see it; a
    pair of acronyms (``URL``) has both sides in capitals and passes."""
    def capitals(text: str) -> bool:  # every letter upper case: Hangul around an acronym (``HTML 문서``) is not
        return (text.isupper() and sum(c.isupper() for c in text) >= MIN_CASED_LETTERS
                and all(c.isupper() for c in text if c.isalpha()))

    return np.array([(capitals(target) and source != source.upper()) or (capitals(source) and target != target.upper())
                     for source, target in zip(sources, targets)], dtype=bool)


def markup_mismatch(sources: Sequence[str], targets: Sequence[str]) -> np.ndarray:
    """A pair whose sides carry different markup: another number of tags, or other character entities. A target
    wrapped in the page's tags, or escaped (``&amp;``) where its source is not, teaches a model to write markup
    that no input asks for, and keeps the words and their order that every other signal reads. Tags are counted,
    not named, since a translator translates a placeholder's name (``<prefix>``, ``<Präfix>``)."""
    def markup(text: str) -> tuple[int, list[str]]:  # the regular expressions only where a side could match
        return (len(_TAG.findall(text)) if "<" in text else 0, sorted(_ENTITY.findall(text)) if "&" in text else [])

    return np.array([markup(source) != markup(target) for source, target in zip(sources, targets)], dtype=bool)


def characters(texts: Sequence[str]) -> np.ndarray:
    """Each text's characters, without the spaces around it."""
    return np.array([len(text.strip()) for text in texts], dtype=np.int64)


def length_log_ratios(sources: Sequence[str], targets: Sequence[str]) -> np.ndarray:
    """log((target characters + 1) / (source characters + 1)) per pair."""
    return np.log1p([len(t) for t in targets]) - np.log1p([len(s) for s in sources])


class LexicalModel:
    """IBM Model 1 (Brown et al., 1993) in both directions, fitted by EM over lowercase words; a pair's score is
    the mean of its two directions' per-word log-likelihoods. The word-translation table behind word aligners
    such as eflomal and fast_align, without their distortion terms: adequacy, not word order."""

    def __init__(self, sources: Sequence[str], targets: Sequence[str], iterations: int = 5):
        src, tgt = [words(s) for s in sources], [words(t) for t in targets]
        self.forward, self.backward = _ibm1(src, tgt, iterations), _ibm1(tgt, src, iterations)
        self.weight_target, self.weight_source = _information(tgt), _information(src)

    def scores(self, sources: Sequence[str], targets: Sequence[str]) -> np.ndarray:
        src, tgt = [words(s) for s in sources], [words(t) for t in targets]
        both = np.array([_ibm1_scores(self.forward, self.weight_target, src, tgt),
                         _ibm1_scores(self.backward, self.weight_source, tgt, src)])
        out = np.full(len(src), np.nan)
        known = ~np.isnan(both).all(axis=0)
        out[known] = np.nanmean(both[:, known], axis=0)
        return out

    def order(self, sources: Sequence[str], targets: Sequence[str]) -> np.ndarray:
        """How far each target keeps its source's word order: Kendall's τ between the positions of the target
        words and those of the source words that best translate them (the forward table's links, as a word
        aligner's diagonal prior reads them). Sound translations keep much of the order (τ about 0.5 in the bundled
        German), shuffled targets none (τ about 0). NaN with fewer than :data:`ORDER_LINKS` links or no variation
        in either position: a short pair says nothing about order."""
        out = np.full(len(sources), np.nan)
        for k, (source, target) in enumerate(zip(sources, targets)):
            source, links = words(source), []
            for j, word in enumerate(words(target)):
                chances = [self.forward.get((e, word), 0.0) for e in source]
                if chances and (best := max(chances)) > 0:
                    links.append((j, chances.index(best)))
            if len(links) >= ORDER_LINKS:
                out[k] = _kendall_tau(*np.array(links).T)
        return out


#: The least links a pair needs for its word order to be measured.
ORDER_LINKS = 3


def _kendall_tau(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's τ-b of two short sequences (ties in either count for neither side); NaN if one is constant. Not
    ``scipy.stats.kendalltau``: on a few links it takes about 100 times as long (0.8 ms), and it runs once per pair."""
    dx, dy = np.sign(x[:, None] - x[None, :]), np.sign(y[:, None] - y[None, :])
    pairs_x, pairs_y = np.count_nonzero(dx), np.count_nonzero(dy)
    return float((dx * dy).sum() / math.sqrt(pairs_x * pairs_y)) if pairs_x and pairs_y else math.nan


def shuffled(texts: Sequence[str], rng: np.random.Generator) -> list[str]:
    """Each text's words in a random order: what a pair with no word order scores, for the order signal's null."""
    return [" ".join(np.asarray(tokens)[rng.permutation(len(tokens))]) if (tokens := text.split()) else text
            for text in texts]


def _information(sentences: list[list[str]]) -> dict[str, float]:
    """Each word's self-information, log(tokens / count): a pair earns little for explaining "und" by "and",
    which any two sentences share."""
    counts = Counter(w for sentence in sentences for w in sentence)
    total = sum(counts.values())
    return {w: math.log(total / c) for w, c in counts.items()}


def _ibm1(sources: list[list[str]], targets: list[list[str]], iterations: int) -> dict[tuple[str, str], float]:
    """t(target word | source word), NULL source included, from uniform by EM, vectorised over co-occurrences."""
    vocab_s = {w: i for i, w in enumerate(["<null>"] + sorted({w for s in sources for w in s}))}
    vocab_t = {w: i for i, w in enumerate(sorted({w for t in targets for w in t}))}
    rows, cols, tokens = [], [], []  # one entry per (target token, source word) co-occurrence
    token = 0
    for source, target in zip(sources, targets):
        ids_s = [0] + [vocab_s[w] for w in source]
        for w in target:
            rows += ids_s
            cols += [vocab_t[w]] * len(ids_s)
            tokens += [token] * len(ids_s)
            token += 1
    if not rows:
        return {}
    rows, cols, tokens = np.asarray(rows), np.asarray(cols), np.asarray(tokens)
    pair_ids, pair_of = np.unique(rows * len(vocab_t) + cols, return_inverse=True)
    table = np.ones(len(pair_ids))
    pair_source = pair_ids // len(vocab_t)
    for _ in range(iterations):
        weights = table[pair_of]
        posterior = weights / np.bincount(tokens, weights)[tokens]
        counts = np.bincount(pair_of, posterior, minlength=len(pair_ids))
        totals = np.bincount(pair_source, counts, minlength=len(vocab_s))
        table = counts / totals[pair_source]
    inverse_s, inverse_t = list(vocab_s), list(vocab_t)
    return {(inverse_s[i // len(vocab_t)], inverse_t[i % len(vocab_t)]): p for i, p in zip(pair_ids, table)}


def _ibm1_scores(table: dict, weight: dict[str, float], sources: list[list[str]],
                 targets: list[list[str]]) -> np.ndarray:
    """How much of each target its source explains, in [0, 1]: over the target words the model knows, the mean of
    their best translation probability from a source word, max_e t(f | e), weighted by each word's
    self-information. NaN when the model knows no target word (a word never seen in fitting says nothing)."""
    out = np.full(len(sources), np.nan)
    for k, (source, target) in enumerate(zip(sources, targets)):
        target = [t for t in target if t in weight]
        if target:
            total = sum(weight[t] for t in target)
            if total > 0:
                out[k] = sum(weight[t] * max((table.get((s, t), 0.0) for s in source), default=0.0)
                             for t in target) / total
    return out


class FluencyModel:
    """A word bigram language model of the target side, interpolated with unigrams (λ = 0.7) and add-one smoothed
    unigrams: a pair's score is its target's mean log-probability per word. Shuffled or truncated word order,
    and text in another language, fall below the dev pairs' scores."""

    def __init__(self, texts: Sequence[str], interpolation: float = 0.7):
        self.unigrams, self.bigrams, self.contexts = Counter(), Counter(), Counter()
        for text in texts:
            tokens = ["<s>"] + words(text) + ["</s>"]
            self.unigrams.update(tokens[1:])
            self.contexts.update(tokens[:-1])
            self.bigrams.update(zip(tokens[:-1], tokens[1:]))
        self.total, self.vocab, self.interpolation = sum(self.unigrams.values()), len(self.unigrams) + 1, interpolation

    def scores(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros(len(texts))
        for k, text in enumerate(texts):
            tokens = ["<s>"] + words(text) + ["</s>"]
            total = 0.0
            for previous, word in zip(tokens[:-1], tokens[1:]):
                unigram = (self.unigrams[word] + 1) / (self.total + self.vocab)
                context = self.contexts[previous]
                bigram = self.bigrams[previous, word] / context if context else 0.0
                total += math.log(self.interpolation * bigram + (1 - self.interpolation) * unigram)
            out[k] = total / (len(tokens) - 1)
        return out
