class ExternalProcess:  # placeholder, replaced by the real module
    pass
