"""The shop environment as a new user's package ships it: its class declares a name that no registry knows.

The environment is reached only the ways ``docs/add_an_environment.md`` offers (an import path, an alias, an entry
point), so every row and trace it produces must name it the way it was reached.
"""

from mock_shop import ShopEnvironment


class PluginShop(ShopEnvironment):
    name = "plugin_shop"  # registered nowhere on purpose
