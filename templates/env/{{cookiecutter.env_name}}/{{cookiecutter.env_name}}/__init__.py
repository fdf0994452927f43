"""{{cookiecutter.title}}: guess a secret number between 1 and 100; each answer says higher or lower."""

from .client import {{cookiecutter.class_prefix}}Client
from .environment import {{cookiecutter.class_prefix}}Environment
from .models import {{cookiecutter.class_prefix}}Action, {{cookiecutter.class_prefix}}Observation, {{cookiecutter.class_prefix}}State

__all__ = ["{{cookiecutter.class_prefix}}Action", "{{cookiecutter.class_prefix}}Client", "{{cookiecutter.class_prefix}}Environment", "{{cookiecutter.class_prefix}}Observation", "{{cookiecutter.class_prefix}}State"]
