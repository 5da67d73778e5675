"""Models: building tiny models from configs and loading hub/local models.

This package module stays light (no torch): the CLI checks a model path with
``model_problem`` (``local_model_problem`` for a directory, ``hub_model_problem`` for a
hub id) before it makes a run directory or loads anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

MODEL_FILES = ("config.json", "adapter_config.json")
"""A transformers model directory holds one of these (a peft adapter: the second)."""


def is_local_path(path_or_id: str) -> bool:
    """Whether ``path_or_id`` names a local path rather than a hub id: it starts with
    ``/``, ``./``, ``../`` or ``~``, has more than one ``/`` (a hub id is ``NAME`` or
    ``ORG/NAME``), is ``.`` or ``..``, or exists on disk (transformers then loads it
    from there)."""
    return (path_or_id.startswith(("/", "./", "../", "~")) or path_or_id.count("/") > 1
            or path_or_id in (".", "..") or Path(path_or_id).expanduser().exists())


def local_model_problem(path_or_id: str) -> str | None:
    """Why ``path_or_id`` cannot be loaded as a transformers model, where that shows
    without loading it; None for a directory holding one of ``MODEL_FILES`` and for a
    name that may be a hub id (whether the hub has it shows only when it is loaded).

    Returns:
        One phrase, e.g. ``"no such directory"``, ``"a file, not a model directory"``,
        ``"a directory without config.json: not a transformers model directory"``,
        ``"empty: give a local model directory or a hub id (ORG/NAME)"``.
    """
    if not path_or_id.strip():
        return "empty: give a local model directory or a hub id (ORG/NAME)"
    if not is_local_path(path_or_id):
        return None
    local = Path(path_or_id).expanduser()
    if not local.exists():
        return "no such directory"
    if not local.is_dir():
        return "a file, not a model directory"
    if not any((local / name).is_file() for name in MODEL_FILES):
        return "a directory without config.json: not a transformers model directory"
    return None


HUB_PROBE_TIMEOUT_S = 3.0
"""Seconds the hub may take to answer ``hub_model_problem``'s one request (per phase:
connect, read); no retries. Without it transformers retried an unreachable hub for
~60 s before it said so."""


def model_problem(path_or_id: str, timeout_s: float = HUB_PROBE_TIMEOUT_S,
                  log: Callable[[str], None] | None = None) -> str | None:
    """Why ``path_or_id`` cannot be loaded as a transformers model: a local path is
    checked on disk (``local_model_problem``), a hub id against the local Hugging Face
    cache and, briefly, the hub (``hub_model_problem``). None when it can be loaded, as
    far as that shows without loading it. One phrase, as ``local_model_problem``'s."""
    problem = local_model_problem(path_or_id)
    if problem or is_local_path(path_or_id):
        return problem
    return hub_model_problem(path_or_id, timeout_s, log)


def hub_model_problem(model_id: str, timeout_s: float = HUB_PROBE_TIMEOUT_S,
                      log: Callable[[str], None] | None = None) -> str | None:
    """Why the hub id ``model_id`` (``ORG/NAME``) cannot be loaded, asking the hub once
    (a HEAD of its ``config.json``, at most ``timeout_s`` seconds per phase, no retry):
    not a valid id, not cached under ``HF_HUB_OFFLINE=1``, the hub unreachable (no
    network), no such (or a private or gated) repository, no ``config.json`` in it.
    None when the hub has it, or when it is in the local Hugging Face cache
    (``huggingface_hub.try_to_load_from_cache``: ``HF_HUB_CACHE``, ``HF_HOME``).

    A cached id whose hub cannot be reached switches this process to offline mode
    (``HF_HUB_OFFLINE=1`` and huggingface_hub's flag): transformers then loads it from
    the cache at once, where it retried every file it looked for (measured: 2 min 49 s
    for a tiny model). ``log`` gets one line saying so. Honours ``HF_ENDPOINT`` (read by
    huggingface_hub when it is imported) and the stored token (``HF_TOKEN``).

    Returns:
        One phrase, e.g. ``"not in the local Hugging Face cache and the hub
        https://huggingface.co cannot be reached (no network? ...)"``, or None.
    """
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(model_id)
    except HFValidationError:
        return ("neither a local model directory nor a hub id (ORG/NAME: letters, digits, "
                "'-', '_', '.')")
    cached = any(isinstance(try_to_load_from_cache(model_id, name), str) for name in MODEL_FILES)
    where = f"the local Hugging Face cache ({constants.HF_HUB_CACHE})"
    if constants.HF_HUB_OFFLINE:
        return None if cached else (
            f"not in {where}, and HF_HUB_OFFLINE=1 (offline) forbids downloading it: "
            "download it on a machine with network, or give a local model directory")
    problem, unreachable = _hub_probe(model_id, timeout_s)
    if cached:
        if unreachable:
            os.environ["HF_HUB_OFFLINE"] = "1"  # for processes started from here on
            constants.HF_HUB_OFFLINE = True  # read at each call by huggingface_hub and transformers
            if log is not None:
                log(f"note: {problem}; loading {model_id!r} from {where} (offline mode)")
        return None
    if unreachable:
        return (f"not in {where}, and {problem}: connect to the network, set HF_ENDPOINT to "
                "a reachable mirror, or give a local model directory")
    return problem


def _hub_probe(model_id: str, timeout_s: float) -> tuple[str | None, bool]:
    """``(problem, unreachable)`` of one HEAD request for ``model_id``'s ``config.json``
    (then ``adapter_config.json``) on the hub: ``(None, False)`` when it is there;
    ``unreachable`` when no answer came (no network, a refused connection, a timeout).

    The request goes through huggingface_hub's own HTTP client (its proxies and
    certificates) with its error classes, but not through ``get_hf_file_metadata``:
    the user-agent header that builds first fetched a registry of agent harnesses from
    the hub, with a timeout of its own (3 s more on a network that drops packets)."""
    from huggingface_hub import constants, get_session, get_token, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
    )
    from huggingface_hub.utils import hf_raise_for_status

    hub = constants.ENDPOINT
    token = get_token()
    headers = {"user-agent": "polyrl"} | ({"authorization": f"Bearer {token}"} if token else {})
    for name in MODEL_FILES:
        try:
            response = get_session().head(hf_hub_url(model_id, name), headers=headers,
                                          timeout=timeout_s, follow_redirects=False)
        except Exception as e:  # noqa: BLE001 -- the HTTP client's connect/timeout errors
            why = str(e).strip() or type(e).__name__
            if "timed out" in why.lower():
                why = f"no answer within {timeout_s:g} s"
            return f"the hub {hub} cannot be reached (no network? {why})", True
        try:
            hf_raise_for_status(response)  # a redirect (a renamed repository) is no error
            return None, False
        except EntryNotFoundError:
            continue
        except GatedRepoError:
            return (f"a gated model on {hub}: accept its terms there, then log in "
                    "(`hf auth login`) or set HF_TOKEN"), False
        except RepositoryNotFoundError:
            return (f"not found on {hub} (no such model, or a private one: log in with "
                    "`hf auth login` or set HF_TOKEN)"), False
        except HfHubHTTPError:
            return f"the hub {hub} answered HTTP {response.status_code} for it", False
    return (f"its repository on {hub} holds no {' or '.join(MODEL_FILES)}: not a "
            "transformers model"), False
