class BatchEnv:  # placeholder, replaced by the real module
    pass
