"""A hydra-zen single-file app: its config builds ``__main__.make_model`` (``builds``), the
task is ``zen(task)`` and logs the metric ``width``. ``fail=true`` raises in the task.

python tests/apps/zen_app.py -m hydra/launcher=seml model.width=2,3 [fail=true]
"""

from hydra_zen import builds, make_config, store, zen

from seml_hydra import log_scalar


def make_model(width: int = 1) -> dict:
    return {"width": width, "built_by": make_model.__module__}


def task(model: dict, fail: bool = False) -> dict:
    if fail:
        raise ValueError(f"the zen task fails on purpose (width {model['width']})")
    log_scalar("width", model["width"])
    return model


store(
    make_config(model=builds(make_model, populate_full_signature=True), fail=False), name="config"
)

if __name__ == "__main__":
    store.add_to_hydra_store()
    zen(task).hydra_main(config_name="config", config_path=None, version_base="1.3")
