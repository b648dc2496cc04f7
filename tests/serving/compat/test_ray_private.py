"""Ray's private imports hold only for the Ray release they were read in."""

import pytest
import ray

from serving.compat import ray_private


def test_the_installed_ray_is_the_one_the_internals_were_read_in():
    assert ray.__version__.startswith(ray_private.SUPPORTED_RAY)
    ray_private.check_ray_version()
    for name in ray_private.__all__:
        assert getattr(ray_private, name) is not None


def test_another_ray_is_refused_naming_the_pin(monkeypatch):
    monkeypatch.setattr(ray, "__version__", "2.61.0")
    with pytest.raises(RuntimeError, match=r"found Ray 2\.61\.0: pin ray\[serve\]==2\.60\.0"):
        ray_private.check_ray_version()
