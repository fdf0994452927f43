"""Making and publishing an environment: `envkit new` (`scaffold`), `envkit validate` (`validate`), `envkit push`
to a Hugging Face Space (`space`), and reading the Dockerfiles they check (`dockerfile`)."""

from ..moved import moved_names

__getattr__ = moved_names(__name__, "envkit.publish.space")   # what `envkit.publish` held before it was a package
