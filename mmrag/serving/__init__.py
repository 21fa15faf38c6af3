"""Ray-free pieces of the serving endpoint: the HTTP API in both dialects (`/v1/answer`, OpenAI chat completions),
request validation and image checks, the API key, response bodies, and the greedy stages the replicas run."""
