-- CreateTable
CREATE TABLE "Workspace" (
    "name" TEXT NOT NULL,
    "root" TEXT NOT NULL,
    "createdBy" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "Workspace_pkey" PRIMARY KEY ("name")
);

-- CreateTable
CREATE TABLE "WorkspaceBinding" (
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "workspace" TEXT NOT NULL,
    "createdBy" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "WorkspaceBinding_pkey" PRIMARY KEY ("platform","account","chatId")
);

-- CreateIndex
CREATE INDEX "WorkspaceBinding_workspace_idx" ON "WorkspaceBinding"("workspace");

-- AddForeignKey
ALTER TABLE "WorkspaceBinding" ADD CONSTRAINT "WorkspaceBinding_workspace_fkey" FOREIGN KEY ("workspace") REFERENCES "Workspace"("name") ON DELETE CASCADE ON UPDATE CASCADE;
