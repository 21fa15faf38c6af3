"""Answer metrics: how a generated answer is compared with the reference answers (rule reward, evaluation)."""
