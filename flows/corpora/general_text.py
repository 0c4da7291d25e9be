"""General-domain text from files: held-out text a run measures forgetting on.

Read exactly as `corpus.paths` is (the same readers and formats, the same cleaning and
deduplication), but named by another setting, so an error names that setting and its glob.
"""

from __future__ import annotations

from collections.abc import Iterator

from flows.core.settings import ConfigError
from flows.corpora.base import Corpus, CorpusSettings, dropped_text
from flows.corpora.file_source import FileSource, resolve_paths
from flows.corpora.formats import CorpusInputError


def general_text(paths: list[str], file_format: str, key: str, cleaning: CorpusSettings) -> Corpus:
    """The files `paths` name (files, globs or directories) in `file_format` (auto: by suffix),
    cleaned by the run corpus's rules (`cleaning`: normalization, min_words, max_chars). A glob
    that matches nothing raises CorpusInputError naming `key`."""
    settings = CorpusSettings(
        kind="files",
        paths=list(paths),
        format=file_format,
        normalization=cleaning.normalization,
        min_words=cleaning.min_words,
        max_chars=cleaning.max_chars,
    )
    source = FileSource(settings.paths, file_format, settings.text_field, settings.read_rules, key)
    return Corpus(settings, source)


def general_documents(
    paths: list[str], file_format: str, key: str, cleaning: CorpusSettings
) -> Iterator[str]:
    """The cleaned, deduplicated documents of `general_text`, in file order."""
    return general_text(paths, file_format, key, cleaning).documents()


def check_general_text(corpus: Corpus, key: str) -> None:
    """Fails (CorpusInputError naming `key` and its globs) unless a document survives cleaning;
    reads only up to the first one, so a large sample costs a moment before any stage."""
    if next(corpus.documents(), None) is not None:
        return
    globs = ", ".join(repr(path) for path in corpus.settings.paths)
    raise CorpusInputError(
        f"{key}: {globs} holds no document after cleaning "
        f"({dropped_text(corpus.settings, corpus.stats)}); point it at general-domain text or "
        "relax the corpus's cleaning rules"
    )


def check_held_out(paths: list[str], key: str, corpus: CorpusSettings) -> None:
    """Fails (ConfigError naming both keys and the file) when a file of `paths` is also one the
    run trains on (`corpus.paths`, `corpus.replay.paths`): text the model trains on cannot
    measure what it forgot, and its loss would fall as if nothing were."""
    trained = {"corpus.paths": corpus.paths if corpus.kind == "files" else []}
    if corpus.replay is not None:
        trained["corpus.replay.paths"] = corpus.replay.paths
    held = resolve_paths(paths, key)
    for name, patterns in trained.items():
        shared = sorted(set(held) & set(resolve_paths(patterns, name))) if patterns else []
        if shared:
            more = f" (and {len(shared) - 1} more)" if len(shared) > 1 else ""
            raise ConfigError(
                f"{key} and {name} both name {shared[0]}{more}: general text the run trains on "
                f"cannot measure what it forgot; hold it out of {name} or name other text"
            )
