"""Making and publishing an environment: `envkit new` (`scaffold`), `envkit validate` (`validate`), `envkit push`
to a Hugging Face Space (`space`), and reading the Dockerfiles they check (`dockerfile`)."""
