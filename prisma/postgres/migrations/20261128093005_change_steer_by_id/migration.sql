-- AlterTable
ALTER TABLE "ChangeSteer" ADD COLUMN     "byId" TEXT;
