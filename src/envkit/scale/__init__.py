"""Scale-out: several server processes behind one port (`workers`), servers placed by Ray (`ray_serve`), and the
registry that tells clients where they are (`registry`). Clients choose a server with `envkit.client.placement`.
"""
