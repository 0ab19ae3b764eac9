"""enginecfg subpackage."""

if __name__ == "pipeline":  # imported by its bare name from a checkout root on sys.path
    from enginecfg._layout import hand_over_bare_import

    hand_over_bare_import(__name__, __file__)
