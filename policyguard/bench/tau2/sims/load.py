"""The inputs of ``bench sims``: tau2 results files and ``bench tau2`` output folders."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from policyguard.errors import ConfigError

from .model import first_error

if TYPE_CHECKING:  # pragma: no cover
    from tau2.data_model.simulation import Results, SimulationRun
    from tau2.data_model.tasks import Task


def load_results_file(path: str | Path) -> Results:
    """A tau2 results file, validated by tau2's own model; a one-line error naming the file otherwise."""
    from ..domain import import_tau2

    import_tau2()
    from tau2.data_model.simulation import Results

    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read the results file: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        return Results.model_validate_json(text)
    except ValidationError as exc:
        raise ConfigError(f"{file}: not a tau2 results file: {first_error(exc)}") from exc


class RunSource:
    """The simulations of one input (a results file or a ``bench tau2`` output folder) and its own tasks."""

    def __init__(self, name: str, simulations: list[SimulationRun], tasks: list[Task], skipped: int = 0) -> None:
        self.name = name
        self.simulations = simulations
        self.tasks = tasks
        self.skipped = skipped


def load_source(path: str | Path, domain: str) -> RunSource:
    """A tau2 results file, or a folder written by ``policyguard bench tau2``; checks the domain."""
    file = Path(path)
    if file.is_dir():
        return _load_run_dir(file, domain)
    results = load_results_file(file)
    found = results.info.environment_info.domain_name if results.info.environment_info is not None else None
    if found is not None and found != domain:
        raise ConfigError(f"{file}: results of the {found!r} domain, not {domain!r} (pass --domain {found})")
    return RunSource(file.name, list(results.simulations), list(results.tasks))


def _load_run_dir(folder: Path, domain: str) -> RunSource:
    """``bench tau2`` output: ``run.json`` and one ``sims/*.json`` per simulation, each holding its dialogue."""
    from tau2.data_model.simulation import RewardInfo, SimulationRun

    from ..runner import SPEC_FILE, RunSpec, load_results

    spec_path = folder / SPEC_FILE
    if not spec_path.is_file():
        raise ConfigError(f"{folder}: a folder but no {SPEC_FILE} (not a 'bench tau2' output folder)")
    try:
        spec = RunSpec.model_validate_json(spec_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{spec_path}: not a 'bench tau2' run spec: {str(exc).splitlines()[0]}") from exc
    if spec.domain != domain:
        raise ConfigError(
            f"{folder}: a run of the {spec.domain!r} domain, not {domain!r} (pass --domain {spec.domain})"
        )
    sims: list[SimulationRun] = []
    skipped = 0
    for result in load_results(folder):
        if result.simulation is None:  # an infrastructure error, or a run from before dialogues were kept
            skipped += 1
            continue
        try:
            sim = SimulationRun.model_validate(result.simulation)
        except ValidationError as exc:
            raise ConfigError(f"{folder}/{result.key}: not a tau2 simulation: {first_error(exc)}") from exc
        reward = None if result.reward is None else RewardInfo(reward=result.reward)
        sims.append(sim.model_copy(update={"reward_info": reward, "trial": result.trial}))
    if not sims and skipped:
        raise ConfigError(
            f"{folder}: none of its {skipped} simulation(s) kept its dialogue (infra errors or an old run)"
        )
    return RunSource(folder.name, sims, [], skipped)
